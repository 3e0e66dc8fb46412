/* failure.c: a failure of the state file (failure.mode) that starts after calls on the GPU:
 * failure.after_calls calls answer normally, then each call starts it with chance
 * failure.probability_ppb / 10^9, drawn as splitmix64(seed + k) mod 10^9 for the k-th call past
 * after_calls (the same seed starts it at the same call). The library has no daemon: the calls are
 * counted in each process, so a consumer sees the GPU go bad in the middle of its run. Once started it is
 * applied to every snapshot the process publishes as the static failure is: lost and fallen off the bus
 * make the GPU lost; uncorrectable ECC adds an uncorrected DRAM error and a failed row remap. */
#include <stdatomic.h>

#include "failure.h"

static _Atomic uint64_t calls[MK_MAX_DEVICES];
static _Atomic uint64_t started_at[MK_MAX_DEVICES]; /* epoch at which the failure started; 0 not started */
static _Atomic uint64_t epoch;

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int mk_failure_call(const struct mk_device *d, uint32_t i) {
    if (atomic_load_explicit(&started_at[i], memory_order_acquire)) return 1;
    uint64_t n = atomic_fetch_add_explicit(&calls[i], 1, memory_order_relaxed) + 1;
    if (n <= d->fail_after_calls) return 0;
    if (d->fail_probability_ppb < 1000000000u &&
        splitmix64(d->fail_seed + (n - d->fail_after_calls)) % 1000000000u >= d->fail_probability_ppb)
        return 0;
    uint64_t none = 0, mine = atomic_fetch_add(&epoch, 1) + 1;
    return atomic_compare_exchange_strong(&started_at[i], &none, mine) ? 2 : 1;
}

uint64_t mk_failure_epoch(void) { return atomic_load(&epoch); }

void mk_failure_apply(struct mk_snap *s) {
    for (uint32_t i = 0; i < s->ndev; i++) {
        struct mk_device *d = &s->dev[i];
        if (d->fail_mode == MK_FAIL_NONE) {
            atomic_store(&started_at[i], 0);
            atomic_store(&calls[i], 0);
            continue;
        }
        if (!atomic_load(&started_at[i])) {
            if (d->lost == 0) d->lost = MK_LOST_LATER; /* the handle checks count its calls */
            continue;
        }
        if (d->fail_mode != MK_FAIL_ECC) {
            d->lost = 1;
            continue;
        }
        for (int scope = 0; scope < 2; scope++)
            if (d->ecc[scope][1][2] == 0) d->ecc[scope][1][2] = 1; /* [vol|agg][dbe][dram] */
        if (d->remap_supported) {
            if (d->remap_unc == 0) d->remap_unc = 1;
            d->remap_failure = 1;
        }
    }
}

uint32_t mk_failure_xid(const struct mk_snap *s, uint32_t i, uint64_t since, uint64_t *at) {
    uint64_t when = atomic_load(&started_at[i]);
    if (i >= s->ndev || when <= since || s->dev[i].fail_mode == MK_FAIL_NONE) return 0;
    *at = when;
    return s->dev[i].fail_xid;
}

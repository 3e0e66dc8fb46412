/* Time-varying metrics: values change once per wall-clock second, identically in every process; evaluated
 * once per second (mk_dynamic_update), never per call. */
#include <time.h>

#include "dynamic.h"

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27; x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* uniform integer in [lo, hi] for (device, second, channel): the same in every process */
static uint32_t dyn_uniform(const struct mk_snap *s, const struct mk_device *d, uint64_t sec, unsigned ch,
                            uint32_t lo, uint32_t hi) {
    if (hi <= lo) return lo;
    uint64_t idx = (uint64_t)(d - s->dev);
    uint64_t r = mix64(d->dyn_seed ^ mix64((idx + 1) * 0x9E3779B97F4A7C15ull ^ sec) ^ ((uint64_t)ch << 56));
    return lo + (uint32_t)(r % ((uint64_t)hi - lo + 1));
}

static unsigned temperature(const struct mk_snap *s, const struct mk_device *d, uint64_t t) {
    uint32_t period = d->dyn_temp_period ? d->dyn_temp_period : 60;
    uint32_t phase = (uint32_t)(t % period);
    /* triangle wave 0..1..0 over the period (no libm) */
    uint32_t tri2 = phase * 2 < period ? phase * 2 : (period - phase) * 2; /* 0..period */
    int64_t v = (int64_t)d->dyn_temp_base + ((int64_t)d->dyn_temp_ramp * tri2 + period / 2) / period;
    v += (int64_t)dyn_uniform(s, d, t, 1, 0, 2 * d->dyn_temp_var) - d->dyn_temp_var;
    if (v < 0) v = 0;
    if (d->temp_shutdown && v > d->temp_shutdown) v = d->temp_shutdown;
    return (unsigned)v;
}

static unsigned power_usage(const struct mk_snap *s, const struct mk_device *d, uint64_t t) {
    int64_t v = (int64_t)d->dyn_power_base + dyn_uniform(s, d, t, 2, 0, 2 * d->dyn_power_var) - d->dyn_power_var;
    if (d->power_min && v < d->power_min) v = d->power_min;
    if (d->power_max && v > d->power_max) v = d->power_max;
    return v < 0 ? 0 : (unsigned)v;
}

static uint32_t util_band(const struct mk_snap *s, const struct mk_device *d, uint64_t t, unsigned ch, uint32_t lo,
                          uint32_t hi) {
    if (lo == 0 && hi == 0) hi = 100;
    if (hi > 100) hi = 100;
    if (lo > hi) lo = hi;
    uint32_t quarter = (hi - lo) / 4;
    unsigned pattern = d->dyn_util_pattern; /* 0 steady, 1 idle, 2 busy, 3 burst */
    if (pattern == 3) {
        uint32_t p = d->dyn_util_burst_period ? d->dyn_util_burst_period : 30;
        pattern = (t / p) % 2 ? 2 : 1;
    }
    if (pattern == 1) return dyn_uniform(s, d, t, ch, lo, lo + quarter);
    if (pattern == 2) return dyn_uniform(s, d, t, ch, hi - quarter, hi);
    return dyn_uniform(s, d, t, ch, lo, hi);
}

uint64_t mk_dynamic_update(struct mk_snap *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    uint64_t t = (uint64_t)ts.tv_sec, to_next = 1000000000ull - (uint64_t)ts.tv_nsec;
    if (s->dyn_second == t) return s->ndynamic ? to_next : UINT64_MAX;
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->ndev; i++) {
        struct mk_device *d = &s->dev[i];
        if (!d->dyn_temp && !d->dyn_power && !d->dyn_util) continue;
        n++;
        if (d->dyn_temp) atomic_store_explicit(&d->dyn_temp_now, temperature(s, d, t), memory_order_relaxed);
        if (d->dyn_power) atomic_store_explicit(&d->dyn_power_now, power_usage(s, d, t), memory_order_relaxed);
        if (d->dyn_util) {
            uint64_t gpu = util_band(s, d, t, 3, d->dyn_util_gpu_min, d->dyn_util_gpu_max);
            uint64_t mem = util_band(s, d, t, 4, d->dyn_util_mem_min, d->dyn_util_mem_max);
            atomic_store_explicit(&d->dyn_util_now, gpu | mem << 32, memory_order_relaxed);
        }
    }
    s->dyn_second = t;
    s->ndynamic = n;
    return n ? to_next : UINT64_MAX;
}

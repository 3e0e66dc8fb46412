/* The performance level the boards run in: every capture's performance_state is P0, the only level they list.
 * Its strings are derived when a snapshot is loaded, so the getters only copy them. */
#include <stdio.h>

#include "levels.h"

enum { GRAPHICS = 0, MEMORY = 2 }; /* positions in the clk_* arrays */

int mk_p0_range(const struct mk_device *d, int clock, unsigned *min, unsigned *max) {
    if (!d->clk_max[clock]) return 0;
    *min = d->clk_cur[clock] < d->clk_max[clock] ? d->clk_cur[clock] : d->clk_max[clock];
    *max = d->clk_max[clock];
    return 1;
}

/* nvml.h's tokens for P0: each clock (the current one), its range, not editable (these boards take no clock
 * offsets), the transfer rate twice the memory clock (double data rate, as nvml.h's example) */
static void derive(struct mk_device *d) {
    unsigned gmin, gmax, mmin, mmax;
    d->p0_modes[0] = 0;
    if (!mk_p0_range(d, GRAPHICS, &gmin, &gmax) || !mk_p0_range(d, MEMORY, &mmin, &mmax)) return;
    snprintf(d->p0_modes, sizeof d->p0_modes,
             MK_P0_PERF "nvclock=%u, nvclockmin=%u, nvclockmax=%u, nvclockeditable=0, "
             "memclock=%u, memclockmin=%u, memclockmax=%u, memclockeditable=0, "
             "memtransferrate=%u, memtransferratemin=%u, memtransferratemax=%u, memtransferrateeditable=0 ;",
             gmin, gmin, gmax, mmin, mmin, mmax, 2 * mmin, 2 * mmin, 2 * mmax);
}

void mk_levels_derive(struct mk_snap *s) {
    for (uint32_t i = 0; i < s->ndev; i++) derive(&s->dev[i]);
}

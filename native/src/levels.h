/* levels.c: the performance level the boards run in (P0), derived from a device's clocks once per snapshot. */
#ifndef MOKKA_LEVELS_H
#define MOKKA_LEVELS_H

#include "mokka.h"

/* a clock's range in P0 (clk_* index): from its current value up to its max; 0: the board has no such clock */
int mk_p0_range(const struct mk_device *d, int clock, unsigned *min, unsigned *max);
/* fill every device's p0_modes string (empty where it lacks a graphics or memory clock) */
void mk_levels_derive(struct mk_snap *s);

#endif

/* dynamic.c: time-varying metrics (device.<i>.dynamic.*), the value a getter reports now.
 * A pure function of the snapshot and the wall-clock second: needs no other file. */
#ifndef MOKKA_DYNAMIC_H
#define MOKKA_DYNAMIC_H

#include "mokka.h"

unsigned mk_temperature(const struct mk_snap *s, const struct mk_device *d);
unsigned mk_power_usage(const struct mk_snap *s, const struct mk_device *d);
void mk_utilization(const struct mk_snap *s, const struct mk_device *d, unsigned *gpu, unsigned *mem);

#endif

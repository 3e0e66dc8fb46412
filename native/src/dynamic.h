/* dynamic.c: time-varying metrics (device.<i>.dynamic.*), the value a getter reports now.
 * The model is a pure function of the snapshot and the wall-clock second: state.c has it evaluated when it
 * publishes a snapshot and when a refresh finds a new second, so a getter only loads the value. */
#ifndef MOKKA_DYNAMIC_H
#define MOKKA_DYNAMIC_H

#include "mokka.h"

/* Evaluate every dynamic device of s for the wall-clock second now, unless s already holds that second's
 * values. Returns the nanoseconds until the next second, UINT64_MAX when no device of s is dynamic.
 * Callers serialise (state.c's refresh lock); getters may read meanwhile. */
uint64_t mk_dynamic_update(struct mk_snap *s);

MK_HOT_INLINE unsigned mk_temperature(const struct mk_device *d) {
    return d->dyn_temp ? atomic_load_explicit(&d->dyn_temp_now, memory_order_relaxed) : d->temp_gpu;
}
MK_HOT_INLINE unsigned mk_power_usage(const struct mk_device *d) {
    return d->dyn_power ? atomic_load_explicit(&d->dyn_power_now, memory_order_relaxed) : d->power_usage;
}
MK_HOT_INLINE void mk_utilization(const struct mk_device *d, unsigned *gpu, unsigned *mem) {
    if (!d->dyn_util) {
        *gpu = d->util_gpu;
        *mem = d->util_mem;
        return;
    }
    uint64_t both = atomic_load_explicit(&d->dyn_util_now, memory_order_relaxed);
    *gpu = (unsigned)both;
    *mem = (unsigned)(both >> 32);
}

#endif

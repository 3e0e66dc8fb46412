/* Time-varying metrics: values change once per wall-clock second, identically in every process. */
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

static uint64_t wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return (uint64_t)ts.tv_sec;
}

unsigned mk_temperature(const struct mk_snap *s, const struct mk_device *d) {
    if (!d->dyn_temp) return d->temp_gpu;
    uint64_t t = wall_seconds();
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

unsigned mk_power_usage(const struct mk_snap *s, const struct mk_device *d) {
    if (!d->dyn_power) return d->power_usage;
    int64_t v = (int64_t)d->dyn_power_base + dyn_uniform(s, d, wall_seconds(), 2, 0, 2 * d->dyn_power_var) -
                d->dyn_power_var;
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

void mk_utilization(const struct mk_snap *s, const struct mk_device *d, unsigned *gpu, unsigned *mem) {
    if (!d->dyn_util) {
        *gpu = d->util_gpu;
        *mem = d->util_mem;
        return;
    }
    uint64_t t = wall_seconds();
    *gpu = util_band(s, d, t, 3, d->dyn_util_gpu_min, d->dyn_util_gpu_max);
    *mem = util_band(s, d, t, 4, d->dyn_util_mem_min, d->dyn_util_mem_max);
}

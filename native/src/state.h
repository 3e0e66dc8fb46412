/* state.c: the state-file reader and the published snapshot. Above log.c only. */
#ifndef MOKKA_STATE_H
#define MOKKA_STATE_H

#include <stdatomic.h>
#include <time.h>

#include "mokka.h"

int mk_parse(const char *buf, size_t len, struct mk_snap **out, char *err, size_t errlen);
void mk_snap_free(struct mk_snap *s);
MK_HIDDEN extern _Atomic(struct mk_snap *) mk_g_snap;
MK_HIDDEN extern _Atomic uint64_t mk_g_next_check;
void mk_refresh_slow(uint64_t now, int force);
const char *mk_state_path(void);
const char *mk_settings_path(void);   /* the setter record beside the state file */
/* the state comes from the node's service (feed.c), not a file this process may write beside */
int mk_state_from_feed(void);
int mk_overlay_settings(struct mk_snap *s, const char *buf, size_t len, char *err, size_t errlen);

/* the vDSO's clock_gettime where the process has one (state.c finds it at load), else libc's: libc's wrapper
 * around the same call is a third of a getter's freshness check */
MK_HIDDEN extern int (*mk_clock_gettime)(clockid_t, struct timespec *);
MK_HOT_INLINE uint64_t mk_now_coarse(void) {
    struct timespec ts;
    mk_clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
MK_HOT_INLINE struct mk_snap *mk_snapshot(void) {
    uint64_t now = mk_now_coarse();
    if (__builtin_expect(now >= atomic_load_explicit(&mk_g_next_check, memory_order_relaxed), 0))
        mk_refresh_slow(now, 0);
    return atomic_load_explicit(&mk_g_snap, memory_order_acquire);
}

#endif

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
/* the last check found a state file it could not take (rejected or rewritten while read) */
int mk_state_torn(void);
const char *mk_state_path(void);
const char *mk_settings_path(void);   /* the setter record beside the state file */
/* the state comes from the node's service (feed.c), not a file this process may write beside */
int mk_state_from_feed(void);
int mk_overlay_settings(struct mk_snap *s, const char *buf, size_t len, char *err, size_t errlen);
/* compute slices of an NVML_COMPUTE_INSTANCE_PROFILE_* (0: none) */
unsigned mk_ci_slices(unsigned profile);

/* the vDSO's clock_gettime where the process has one (state.c finds it at load), else libc's: libc's wrapper
 * around the same call is a third of a getter's freshness check */
MK_HIDDEN extern int (*mk_clock_gettime)(clockid_t, struct timespec *);
MK_HOT_INLINE uint64_t mk_now_coarse(void) {
    struct timespec ts;
    mk_clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A thread's hold on snapshots: the last two distinct ones its calls took. A retired snapshot is freed only
 * once no thread holds it, so a call reads its snapshot however long it runs; readers only store their own
 * slots, never wait. Two slots: a call that takes the snapshot again (mk_dev, then a failure it starts)
 * keeps the first one. */
struct mk_hold {
    _Atomic(struct mk_snap *) snap[2];
    _Atomic int used;        /* a live thread owns it; released at thread exit for the next thread */
    struct mk_hold *next;    /* the list only grows */
};
MK_HIDDEN extern __thread struct mk_hold *mk_t_hold __attribute__((tls_model("initial-exec")));
struct mk_snap *mk_snap_take_slow(void);
/* the current snapshot, held by this thread until it takes another */
MK_HOT_INLINE struct mk_snap *mk_snap_take(void) {
    struct mk_hold *h = mk_t_hold;
    struct mk_snap *p = atomic_load_explicit(&mk_g_snap, memory_order_acquire);
    /* already in this thread's slot since before it was current: held, so it cannot have been freed */
    if (__builtin_expect(h != NULL && p == atomic_load_explicit(&h->snap[0], memory_order_relaxed), 1)) return p;
    return mk_snap_take_slow();
}
MK_HOT_INLINE struct mk_snap *mk_snapshot(void) {
    uint64_t now = mk_now_coarse();
    if (__builtin_expect(now >= atomic_load_explicit(&mk_g_next_check, memory_order_relaxed), 0))
        mk_refresh_slow(now, 0);
    return mk_snap_take();
}

#endif

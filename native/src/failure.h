/* failure.c: failures that start after NVML calls on the GPU, counted in each process. Bottom layer
 * (mokka.h only): state.c applies a started failure to each snapshot, util.h counts the calls. */
#ifndef MOKKA_FAILURE_H
#define MOKKA_FAILURE_H

#include "mokka.h"

/* failure.mode of the state file */
enum { MK_FAIL_NONE, MK_FAIL_LOST, MK_FAIL_OFF_BUS, MK_FAIL_ECC };

/* Count one call on GPU i of a snapshot whose fail_mode is set: 0 not started, 1 started before, 2 this
 * call started it (the caller publishes a new snapshot). */
int mk_failure_call(const struct mk_device *d, uint32_t i);
/* how many failures this process has started: a snapshot published before the last one misses it */
uint64_t mk_failure_epoch(void);
/* Apply the started failures to a freshly parsed snapshot; a GPU whose failure left the file starts over. */
void mk_failure_apply(struct mk_snap *s);
/* Xid of GPU i's failure if it started in this process after `since` (an epoch), else 0; *at: its epoch */
uint32_t mk_failure_xid(const struct mk_snap *s, uint32_t i, uint64_t since, uint64_t *at);

#endif

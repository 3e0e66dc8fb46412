/* What the node's native services (nv-fabricmanager, mokka-kmsg, mokka-ib-responder) share: their log
 * line and the one atomic write.  Each program defines program_name. */
#ifndef MOKKA_SERVICE_H
#define MOKKA_SERVICE_H

#include <stddef.h>
#include <sys/types.h>

/* The program's name: every line it logs starts with it. */
extern const char program_name[];

/* One line on stdout, "NAME: ..." (the node's log forwards it), flushed at once. */
void say(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* Replace path with data as mokka_core.stage.store.atomic_write does: an exclusive temp ".NAME.<12 hex>.tmp"
 * beside it (so the teardown of a node killed between the write and the rename finds it), written whole,
 * given mode, renamed over path.  On failure the temp is gone and errno says why; -1. */
int atomic_write(const char *path, const void *data, size_t len, mode_t mode);

#endif

/* What the node's native services (nv-fabricmanager, mokka-kmsg, mokka-ib-responder) share: their log
 * line, the one atomic write, and the paths under the node's root they are given.  Each program defines program_name. */
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

/* Why PATH, as a surface passes one (relative to the node's root, without ".."), is not such a path; NULL
 * when it is.  The caller reports it as a usage error naming its option. */
const char *not_under_root(const char *path);

/* ROOT without trailing slashes (as Python's Path writes it), then /PATH if PATH is not NULL; malloc'd, exits
 * on out-of-memory. */
char *join_root(const char *root, const char *path);

#endif

/* Folding a path as the kernel walks it, shared by the preload shim and mokka-proc-files: both match what a
 * program names against a few paths, however the program spells them. */
#ifndef MOKKA_PATH_H
#define MOKKA_PATH_H

#include <stddef.h>

/* Whether the first len bytes of prefix (a folded absolute path) name a symlink, for the caller's view. */
typedef int (*is_symlink_fn)(const char *prefix, size_t len);

/* The absolute `path` with `.`, `..` and repeated slashes resolved into `out` (PATH_MAX bytes), as the kernel
 * resolves them (`..` of / is /), so that `/sys/bus/pci/../../../etc/hostname` is matched as /etc/hostname.
 * A trailing slash is kept (it still means "a directory").  0 when that cannot be done by hand (a `..` after
 * a symlink, as is_symlink says, or a result longer than PATH_MAX): use `path` as given. */
int fold_path(const char *path, char *out, is_symlink_fn is_symlink);

#endif

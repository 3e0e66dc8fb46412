/* readlink, readlinkat, realpath, canonicalize_file_name (results carry the node's paths, not the root's) */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include "snip.h"

int main(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink(DEV, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    show("readlink", DEV, n >= 0, buf);
    n = readlinkat(AT_FDCWD, DEV "/driver", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    show("readlinkat", DEV "/driver", n >= 0, buf);
    char *r = realpath(DEV, buf);
    show("realpath", DEV, r != NULL, buf);
    char *c = canonicalize_file_name(DEV "/driver");
    show("canonicalize_file_name", DEV "/driver", c != NULL, c ? c : "");
    free(c);
    r = realpath("/etc", buf);
    show("realpath", "/etc", r != NULL, buf);
    return 0;
}

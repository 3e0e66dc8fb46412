/* The pre-2.33 glibc stat ABI (__xstat, __lxstat, __fxstatat and their 64 forms), as old binaries call it.
   New programs cannot link these compat symbols, so look them up the way the loader would bind them. */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include "snip.h"

typedef int (*xstat_fn)(int, const char *, struct stat *);
typedef int (*fxstatat_fn)(int, int, const char *, struct stat *, int);

int main(void)
{
    const char *names[] = {"__xstat", "__lxstat", "__xstat64", "__lxstat64"};
    struct stat st;
    for (int i = 0; i < 4; i++) {
        xstat_fn f = (xstat_fn)dlsym(RTLD_DEFAULT, names[i]);
        int rc = f ? f(1, DEV, &st) : -1;
        show(names[i], DEV, rc == 0, rc == 0 ? (S_ISLNK(st.st_mode) ? "symlink" : "dir") : "");
    }
    fxstatat_fn at = (fxstatat_fn)dlsym(RTLD_DEFAULT, "__fxstatat");
    int rc = at ? at(1, AT_FDCWD, "/proc/modules", &st, 0) : -1;
    show("__fxstatat", "/proc/modules", rc == 0, rc == 0 ? "file" : "");
    return 0;
}

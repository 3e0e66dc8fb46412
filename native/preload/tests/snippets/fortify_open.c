/* __open_2, __open64_2, __openat_2, __openat64_2: built with -O2 -D_FORTIFY_SOURCE=2, flags unknown
   to the compiler, so glibc's fortified open() calls the __open_2 family. */
#include <fcntl.h>
#include <stdlib.h>
#include "snip.h"

extern int __open_2(const char *, int);
extern int __open64_2(const char *, int);
extern int __openat_2(int, const char *, int);
extern int __openat64_2(int, const char *, int);

int main(int argc, char **argv)
{
    int flags = argc > 5 ? atoi(argv[1]) : O_RDONLY;
    char buf[256];
    int fds[4] = {
        open(DEV "/vendor", flags),
        __open64_2(DEV "/device", flags),
        openat(AT_FDCWD, "/proc/modules", flags),
        __openat64_2(AT_FDCWD, "/proc/driver/nvidia/version", flags),
    };
    const char *names[4] = {"__open_2", "__open64_2", "__openat_2", "__openat64_2"};
    for (int i = 0; i < 4; i++) {
        show(names[i], "", fds[i] >= 0, fds[i] >= 0 ? first_line(fds[i], buf, sizeof buf) : "");
        if (fds[i] >= 0)
            close(fds[i]);
    }
    return 0;
}

/* open, open64, openat (AT_FDCWD and a real dirfd), openat64 */
#include <fcntl.h>
#include "snip.h"

static void try_fd(const char *what, const char *path, int fd)
{
    char buf[256];
    show(what, path, fd >= 0, fd >= 0 ? first_line(fd, buf, sizeof buf) : "");
    if (fd >= 0)
        close(fd);
}

int main(void)
{
    try_fd("open", DEV "/vendor", open(DEV "/vendor", O_RDONLY));
    try_fd("open64", DEV "/device", open64(DEV "/device", O_RDONLY));
    try_fd("openat", "/proc/driver/nvidia/version", openat(AT_FDCWD, "/proc/driver/nvidia/version", O_RDONLY));
    try_fd("openat64", "/proc/modules", openat64(AT_FDCWD, "/proc/modules", O_RDONLY));
    int dir = open(DEV, O_RDONLY | O_DIRECTORY);
    try_fd("openat(dirfd)", "vendor", openat(dir, "vendor", O_RDONLY));
    close(dir);
    try_fd("open", "/dev/nvidia0", open("/dev/nvidia0", O_RDONLY));
    try_fd("open", "/dev/nvidia9", open("/dev/nvidia9", O_RDONLY));
    return 0;
}

/* stat, lstat, stat64, lstat64, fstatat, fstatat64, statx */
#include <fcntl.h>
#include <sys/stat.h>
#include "snip.h"

static const char *kind(mode_t m)
{
    return S_ISLNK(m) ? "symlink" : S_ISDIR(m) ? "dir" : S_ISREG(m) ? "file" : S_ISCHR(m) ? "chardev" : "other";
}

int main(void)
{
    struct stat st;
    struct stat64 st64;
    struct statx stx;
    int rc;
    rc = stat(DEV, &st);
    show("stat", DEV, rc == 0, rc == 0 ? kind(st.st_mode) : "");
    rc = lstat(DEV, &st);
    show("lstat", DEV, rc == 0, rc == 0 ? kind(st.st_mode) : "");
    rc = stat64(DEV "/vendor", &st64);
    show("stat64", DEV "/vendor", rc == 0, rc == 0 ? kind(st64.st_mode) : "");
    rc = lstat64("/proc/driver/nvidia", &st64);
    show("lstat64", "/proc/driver/nvidia", rc == 0, rc == 0 ? kind(st64.st_mode) : "");
    rc = fstatat(AT_FDCWD, DEV, &st, AT_SYMLINK_NOFOLLOW);
    show("fstatat", DEV, rc == 0, rc == 0 ? kind(st.st_mode) : "");
    rc = fstatat64(AT_FDCWD, "/proc/modules", &st64, 0);
    show("fstatat64", "/proc/modules", rc == 0, rc == 0 ? kind(st64.st_mode) : "");
    rc = statx(AT_FDCWD, "/dev/nvidia0", 0, STATX_TYPE, &stx);
    show("statx", "/dev/nvidia0", rc == 0, rc == 0 ? kind(stx.stx_mode) : "");
    rc = stat("/sys/bus/pci/devices/0000:98:00.0", &st);
    show("stat", "/sys/bus/pci/devices/0000:98:00.0", rc == 0, "");
    return 0;
}

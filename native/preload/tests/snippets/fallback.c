/* Paths the root lacks go to the real file; real directories are never hidden. */
#include <fcntl.h>
#include <sys/stat.h>
#include "snip.h"

int main(void)
{
    struct stat st;
    int fd = open("/proc/self/status", O_RDONLY);
    char buf[256];
    show("open", "/proc/self/status", fd >= 0, fd >= 0 ? (first_line(fd, buf, sizeof buf), "real") : "");
    int rc = stat("/dev/null", &st);
    show("stat", "/dev/null", rc == 0 && S_ISCHR(st.st_mode), "real chardev");
    rc = stat("/proc/driver", &st);
    show("stat", "/proc/driver", rc == 0 && S_ISDIR(st.st_mode), "dir");
    rc = access("/sys/kernel", F_OK);
    show("access", "/sys/kernel", rc == 0, "real");
    return 0;
}

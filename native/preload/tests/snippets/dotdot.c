/* `..` and `.` resolved as the kernel resolves them, before the path is matched */
#include <fcntl.h>
#include "snip.h"

static void same(const char *dotted, const char *plain)
{
    char a[256] = "", b[256] = "";
    int fa = open(dotted, O_RDONLY), fb = open(plain, O_RDONLY);
    if (fa >= 0)
        first_line(fa, a, sizeof a);
    if (fb >= 0)
        first_line(fb, b, sizeof b);
    printf("%s is %s: %s\n", dotted, plain, fa >= 0 && fb >= 0 && strcmp(a, b) == 0 ? "same" : "differs");
    if (fa >= 0)
        close(fa);
    if (fb >= 0)
        close(fb);
}

int main(void)
{
    same("/sys/bus/pci/../../../etc/hostname", "/etc/hostname");         /* leaves the node's trees: host */
    same("/sys/bus/pci/../../../../../etc/hostname", "/etc/hostname");   /* `..` above / stays at / */
    same("/dev/nvidia-caps/../nvidia0", "/dev/nvidia0");                 /* a node path: the node's */
    same("/dev/nvidia-caps/../null", "/dev/null");                       /* the host's, the node has none */
    same("/proc/driver/nvidia/./../../modules", "/proc/modules");        /* the node's /proc/modules */
    same("/sys/./bus//pci/devices/0000:99:00.0/vendor", DEV "/vendor");
    return 0;
}

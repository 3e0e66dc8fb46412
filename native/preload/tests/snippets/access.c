/* access, faccessat, euidaccess, eaccess */
#include <fcntl.h>
#include "snip.h"

int main(void)
{
    int rc;
    rc = access(DEV "/vendor", R_OK);
    show("access", DEV "/vendor", rc == 0, "ok");
    rc = faccessat(AT_FDCWD, "/proc/driver/nvidia/version", R_OK, 0);
    show("faccessat", "/proc/driver/nvidia/version", rc == 0, "ok");
    rc = euidaccess("/dev/nvidia0", F_OK);
    show("euidaccess", "/dev/nvidia0", rc == 0, "ok");
    rc = eaccess("/proc/modules", R_OK);
    show("eaccess", "/proc/modules", rc == 0, "ok");
    rc = access("/dev/nvidiactl", F_OK);
    show("access", "/dev/nvidiactl", rc == 0, "ok");
    return 0;
}

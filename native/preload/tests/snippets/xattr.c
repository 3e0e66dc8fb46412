/* getxattr, lgetxattr, listxattr, llistxattr: ls -l asks for ACLs by path; a missing file would be an error */
#include <sys/xattr.h>
#include "snip.h"

static void try(const char *what, const char *path, ssize_t rc)
{
    /* no attributes (ENODATA) or no support (ENOTSUP) both mean the file was found */
    int found = rc >= 0 || errno == ENODATA || errno == ENOTSUP;
    show(what, path, found, "found");
}

int main(void)
{
    char buf[256];
    try("getxattr", DEV "/vendor", getxattr(DEV "/vendor", "system.posix_acl_access", buf, sizeof buf));
    try("lgetxattr", "/dev/nvidia0", lgetxattr("/dev/nvidia0", "security.selinux", buf, sizeof buf));
    try("listxattr", "/proc/driver/nvidia/version", listxattr("/proc/driver/nvidia/version", buf, sizeof buf));
    try("llistxattr", DEV, llistxattr(DEV, buf, sizeof buf));
    try("lgetxattr", "/dev/nvidia9", lgetxattr("/dev/nvidia9", "security.selinux", buf, sizeof buf));
    return 0;
}

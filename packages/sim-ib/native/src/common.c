/* mokka-ib shim: debug switch, socket location, sysfs reading. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

#define DEFAULT_SOCKET "/var/lib/mokka/ib/responder.sock"

int shim_debug_enabled(void)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *value = getenv("MOKKA_DEBUG");
        enabled = value != NULL && (strstr(value, "ib") != NULL || strcmp(value, "all") == 0);
    }
    return enabled;
}

const char *shim_socket_path(void)
{
    static char path[108];
    const char *explicit_path = getenv("MOKKA_IB_SOCKET");
    if (explicit_path != NULL && explicit_path[0] != '\0')
        return explicit_path;
    const char *root = getenv("MOKKA_ROOT");
    if (root == NULL || root[0] == '\0' || strcmp(root, "/") == 0)
        return DEFAULT_SOCKET;
    if ((size_t)snprintf(path, sizeof(path), "%s%s", root, DEFAULT_SOCKET) >= sizeof(path))
        return DEFAULT_SOCKET;
    return path;
}

int shim_read_attr(const char *dir, const char *name, char *buf, size_t size)
{
    char path[4096];
    int saved = errno;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -1;
    /* plain syscalls: our own open() wrapper must not see these */
    int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return -1;
    }
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    errno = saved;
    if (n < 0)
        return -1;
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return (int)n;
}

/* The node's native services' log line and atomic write (service.h). */
#include "service.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

void say(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fputs(program_name, stdout);
    fputs(": ", stdout);
    vfprintf(stdout, format, args);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(args);
}

static int temp_beside(const char *path, char *temp, size_t size)
{
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char random[6];
        if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random)
            return -1;
        int n = snprintf(temp, size, "%.*s.%s.%02x%02x%02x%02x%02x%02x.tmp", (int)dir, path, path + dir,
                         random[0], random[1], random[2], random[3], random[4], random[5]);
        if (n < 0 || (size_t)n >= size) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

int atomic_write(const char *path, const void *data, size_t len, mode_t mode)
{
    char temp[4096];
    int fd = temp_beside(path, temp, sizeof temp);
    if (fd < 0)
        return -1;
    const char *at = data;
    while (len > 0) {
        ssize_t n = write(fd, at, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto failed;
        at += n;
        len -= (size_t)n;
    }
    if (fchmod(fd, mode) != 0) /* exactly mode, whatever the umask */
        goto failed;
    int closed = close(fd);
    fd = -1;
    if (closed != 0)
        goto failed;
    if (rename(temp, path) == 0)
        return 0;
failed:;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(temp);
    errno = saved;
    return -1;
}

const char *not_under_root(const char *path)
{
    if (path[0] == '/' || path[0] == '\0')
        return " must be a path relative to the root";
    for (const char *part = path; part != NULL; part = strchr(part, '/') ? strchr(part, '/') + 1 : NULL)
        if (strncmp(part, "..", 2) == 0 && (part[2] == '/' || part[2] == '\0'))
            return " must stay under the root (no ..)";
    return NULL;
}

char *join_root(const char *root, const char *path)
{
    size_t len = strlen(root);
    while (len > 1 && root[len - 1] == '/')
        len--;
    const char *slash = path == NULL ? "" : len == 1 && root[0] == '/' ? "" : "/";
    char *joined = malloc(len + (path ? strlen(path) : 0) + 2);
    if (joined == NULL) {
        fprintf(stderr, "%s: out of memory\n", program_name);
        exit(1);
    }
    sprintf(joined, "%.*s%s%s", (int)len, root, slash, path ? path : "");
    return joined;
}

/* What every part of mokka-kmsg uses: its log lines and the one atomic write. */
#include "kmsg.h"

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
    fputs(PROGRAM ": ", stdout);
    vfprintf(stdout, format, args);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(args);
}

/* The temp file beside path, ".NAME.<12 hex>.tmp", as mokka_core.stage.store.atomic_write names it
 * (so the teardown of a node killed between the write and the rename finds it). */
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

int atomic_write(const char *path, const void *data, size_t len)
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
    if (fchmod(fd, 0644) != 0) /* exactly 0644, whatever the umask: readers may be other users */
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

char *read_whole(int fd, size_t *len)
{
    size_t size = 0, capacity = 4096;
    char *data = malloc(capacity + 1);
    while (data != NULL) {
        if (size == capacity) {
            char *grown = realloc(data, capacity * 2 + 1);
            if (grown == NULL)
                break;
            data = grown;
            capacity *= 2;
        }
        ssize_t n = read(fd, data + size, capacity - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (n == 0) {
            *len = size;
            return data;
        }
        size += (size_t)n;
    }
    int saved = errno;
    free(data);
    errno = saved;
    return NULL;
}

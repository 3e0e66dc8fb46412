/* Shared helpers for the preload snippet programs: print what a path shows, one line each. */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define DEV "/sys/bus/pci/devices/0000:99:00.0"

__attribute__((unused)) static void show(const char *what, const char *path, int ok, const char *text)
{
    if (ok)
        printf("%s %s: %s\n", what, path, text);
    else
        printf("%s %s: error %s\n", what, path, strerror(errno));
}

/* first line of an fd, without the newline */
__attribute__((unused)) static const char *first_line(int fd, char *buf, size_t size)
{
    ssize_t n = read(fd, buf, size - 1);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

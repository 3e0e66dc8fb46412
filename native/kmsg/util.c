/* What every part of mokka-kmsg uses: its name, and reading a whole file. */
#include "kmsg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char program_name[] = PROGRAM;

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

/* The staged kernel log (kernel_log.py writes it): one /dev/kmsg record per line, read again only when
 * the file changed (device, inode, mtime, size), so a record raised while nobody reads is there for the next. */
#include "kmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void log_init(struct log_file *log, const char *path)
{
    memset(log, 0, sizeof *log);
    log->path = path;
}

static void forget(struct log_file *log)
{
    free(log->data);
    free(log->records);
    log->data = NULL;
    log->records = NULL;
    log->count = 0;
    log->stamped = false;
}

static bool same_stamp(const struct log_file *log, const struct stat *st)
{
    return log->stamped && log->dev == st->st_dev && log->ino == st->st_ino && log->size == st->st_size &&
           log->mtime.tv_sec == st->st_mtim.tv_sec && log->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Split data into its records: each non-empty line with its newline (kernel_log.records does the same). */
static int split(struct log_file *log, char *data, size_t len)
{
    if (len > 0 && data[len - 1] != '\n')
        data[len++] = '\n';
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    struct record *records = calloc(lines ? lines : 1, sizeof *records);
    if (records == NULL)
        return -1;
    size_t count = 0, start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        if (i > start)
            records[count++] = (struct record){data + start, i + 1 - start};
        start = i + 1;
    }
    log->data = data;
    log->records = records;
    log->count = count;
    return 0;
}

static void problem(struct log_file *log, int error)
{
    if (error != log->problem && error != 0)
        say("cannot read the kernel log %s (%s); it reads as empty meanwhile", log->path, strerror(error));
    log->problem = error;
}

void log_refresh(struct log_file *log)
{
    struct stat st;
    if (stat(log->path, &st) != 0) {
        forget(log);
        problem(log, errno == ENOENT ? 0 : errno); /* none yet: an empty log, as a node without one */
        return;
    }
    if (same_stamp(log, &st))
        return;
    forget(log);
    int fd = open(log->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int error = errno;
        if (fd >= 0)
            close(fd);
        problem(log, error == ENOENT ? 0 : error);
        return;
    }
    size_t len = 0;
    char *data = read_whole(fd, &len);
    int error = errno;
    close(fd);
    if (data == NULL) {
        problem(log, error);
        return;
    }
    if (split(log, data, len) != 0) {
        free(data);
        problem(log, ENOMEM);
        return;
    }
    log->stamped = true;
    log->dev = st.st_dev;
    log->ino = st.st_ino;
    log->size = st.st_size;
    log->mtime = st.st_mtim;
    problem(log, 0);
}

size_t log_bytes(const struct log_file *log)
{
    size_t total = 0;
    for (size_t i = 0; i < log->count; i++)
        total += log->records[i].len;
    return total;
}

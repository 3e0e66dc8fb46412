/* /dev/kmsg as a FUSE file: the kernel's protocol spoken directly on /dev/fuse (no libfuse).
 *
 * Readers of /dev/kmsg (util-linux dmesg, node-problem-detector, NVSentinel) parse one record per read(),
 * so every open is DIRECT_IO (each read() reaches us) and each read answers the reader's next record.
 * A reader that opened without O_NONBLOCK waits for the next record, as on a real kernel; one with it
 * gets EAGAIN at the end; a buffer too small for the record is EINVAL, as the kernel says. */
#include "kmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define FILE_MODE (S_IFREG | 0644)
/* what the kernel needs a read of /dev/fuse to hold: a request and max_write bytes (we take no writes) */
#define REQUEST_BUFFER (1 << 17)

struct reader {
    uint64_t fh;
    size_t next_record;
    bool nonblocking;
};
struct waiting { /* a read parked until its reader has a record */
    uint64_t unique, fh;
    uint32_t size;
};
struct server {
    int fd;
    const char *target;
    struct log_file *log;
    struct reader *readers;
    size_t readers_count, readers_capacity;
    struct waiting *waiting;
    size_t waiting_count, waiting_capacity;
    uint64_t next_fh;
    char request[REQUEST_BUFFER];
};

/* items with room for one more of size bytes (moved, if it had to grow); NULL if there is no memory for it. */
static void *grow(void *items, size_t count, size_t *capacity, size_t size)
{
    if (count < *capacity)
        return items;
    size_t more = *capacity ? *capacity * 2 : 8;
    void *grown = realloc(items, more * size);
    if (grown != NULL)
        *capacity = more;
    return grown;
}

static void reply(struct server *server, uint64_t unique, const void *payload, size_t len, int error)
{
    struct fuse_out_header out = {.len = (uint32_t)(sizeof out + len), .error = -error, .unique = unique};
    struct iovec parts[2] = {{&out, sizeof out}, {(void *)payload, len}};
    if (writev(server->fd, parts, len ? 2 : 1) < 0 && errno != ENOENT) /* ENOENT: interrupted meanwhile */
        say("cannot answer the kernel's request %llu (%s)", (unsigned long long)unique, strerror(errno));
}

static struct reader *find_reader(struct server *server, uint64_t fh)
{
    for (size_t i = 0; i < server->readers_count; i++)
        if (server->readers[i].fh == fh)
            return &server->readers[i];
    return NULL;
}

/* Answer a read of fh now, or park it until its reader has a record (server_wake). */
static void answer_read(struct server *server, uint64_t unique, uint64_t fh, uint32_t size)
{
    struct reader *reader = find_reader(server, fh);
    if (reader == NULL) {
        reply(server, unique, NULL, 0, EBADF);
        return;
    }
    log_refresh(server->log);
    if (reader->next_record < server->log->count) {
        const struct record *record = &server->log->records[reader->next_record];
        if (record->len > size) {
            reply(server, unique, NULL, 0, EINVAL); /* as the kernel: the buffer must hold a record */
            return;
        }
        reader->next_record++;
        reply(server, unique, record->text, record->len, 0);
        return;
    }
    if (reader->nonblocking) {
        reply(server, unique, NULL, 0, EAGAIN);
        return;
    }
    struct waiting *waiting = grow(server->waiting, server->waiting_count, &server->waiting_capacity, sizeof *waiting);
    if (waiting == NULL) {
        reply(server, unique, NULL, 0, ENOMEM);
        return;
    }
    server->waiting = waiting;
    server->waiting[server->waiting_count++] = (struct waiting){unique, fh, size};
}

static void open_file(struct server *server, uint64_t unique, const struct fuse_open_in *in)
{
    struct reader *readers = grow(server->readers, server->readers_count, &server->readers_capacity, sizeof *readers);
    if (readers == NULL) {
        reply(server, unique, NULL, 0, ENOMEM);
        return;
    }
    server->readers = readers;
    uint64_t fh = server->next_fh++;
    server->readers[server->readers_count++] = (struct reader){fh, 0, (in->flags & O_NONBLOCK) != 0};
    struct fuse_open_out out = {.fh = fh, .open_flags = FOPEN_DIRECT_IO};
    reply(server, unique, &out, sizeof out, 0);
}

static void release(struct server *server, uint64_t unique, uint64_t fh)
{
    size_t kept = 0;
    for (size_t i = 0; i < server->readers_count; i++)
        if (server->readers[i].fh != fh)
            server->readers[kept++] = server->readers[i];
    server->readers_count = kept;
    kept = 0;
    for (size_t i = 0; i < server->waiting_count; i++)
        if (server->waiting[i].fh != fh)
            server->waiting[kept++] = server->waiting[i];
    server->waiting_count = kept;
    reply(server, unique, NULL, 0, 0);
}

static void interrupt(struct server *server, uint64_t interrupted)
{
    for (size_t i = 0; i < server->waiting_count; i++) {
        if (server->waiting[i].unique != interrupted)
            continue;
        memmove(&server->waiting[i], &server->waiting[i + 1],
                (server->waiting_count - i - 1) * sizeof *server->waiting);
        server->waiting_count--;
        reply(server, interrupted, NULL, 0, EINTR);
        return;
    }
}

static void init(struct server *server, uint64_t unique, const struct fuse_init_in *in)
{
    struct fuse_init_out out = {
        .major = FUSE_KERNEL_VERSION,
        .minor = in->minor < 31 ? in->minor : 31,
        .max_readahead = in->max_readahead,
        .max_background = 16,
        .congestion_threshold = 12,
        .max_write = 4096,
        .time_gran = 1,
    };
    reply(server, unique, &out, sizeof out, 0);
}

static void getattr(struct server *server, uint64_t unique)
{
    log_refresh(server->log);
    struct fuse_attr_out out = {
        .attr = {.ino = 1, .size = log_bytes(server->log), .mode = FILE_MODE, .nlink = 1, .blksize = 4096},
    };
    reply(server, unique, &out, sizeof out, 0);
}

/* The request's body as a type, or NULL if the request is too short to hold one. */
#define BODY(type, request, length)                                                                  \
    ((length) >= sizeof(struct fuse_in_header) + sizeof(type)                                        \
         ? (const type *)((request) + sizeof(struct fuse_in_header))                                 \
         : NULL)

bool server_handle(struct server *server)
{
    ssize_t n = read(server->fd, server->request, sizeof server->request);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ENOENT) /* ENOENT: a request withdrawn */
            return true;
        if (errno != ENODEV) /* ENODEV: unmounted */
            say("cannot read requests from /dev/fuse (%s); %s is no longer served", strerror(errno),
                server->target);
        return false;
    }
    if ((size_t)n < sizeof(struct fuse_in_header))
        return true;
    const struct fuse_in_header *header = (const void *)server->request;
    const char *request = server->request;
    size_t length = (size_t)n;
    uint64_t unique = header->unique;
    switch (header->opcode) {
    case FUSE_INIT: /* major, minor, max_readahead, flags: what every kernel sends, whatever its version */
        length >= sizeof *header + 16 ? init(server, unique, (const void *)(request + sizeof *header))
                                      : reply(server, unique, NULL, 0, EINVAL);
        break;
    case FUSE_GETATTR:
        getattr(server, unique);
        break;
    case FUSE_OPEN: {
        const struct fuse_open_in *in = BODY(struct fuse_open_in, request, length);
        in ? open_file(server, unique, in) : reply(server, unique, NULL, 0, EINVAL);
        break;
    }
    case FUSE_READ: {
        const struct fuse_read_in *in = BODY(struct fuse_read_in, request, length);
        in ? answer_read(server, unique, in->fh, in->size) : reply(server, unique, NULL, 0, EINVAL);
        break;
    }
    case FUSE_INTERRUPT: { /* takes no answer: the interrupted read gets EINTR, if it still waits */
        const struct fuse_interrupt_in *in = BODY(struct fuse_interrupt_in, request, length);
        if (in)
            interrupt(server, in->unique);
        break;
    }
    case FUSE_RELEASE: {
        const struct fuse_release_in *in = BODY(struct fuse_release_in, request, length);
        in ? release(server, unique, in->fh) : reply(server, unique, NULL, 0, EINVAL);
        break;
    }
    case FUSE_FLUSH:
        reply(server, unique, NULL, 0, 0);
        break;
    case FUSE_DESTROY:
        reply(server, unique, NULL, 0, 0);
        return false;
    case FUSE_FORGET: /* those take no answer */
    case FUSE_BATCH_FORGET:
        break;
    default:
        reply(server, unique, NULL, 0, ENOSYS);
    }
    return true;
}

void server_wake(struct server *server)
{
    if (server->waiting_count == 0)
        return;
    log_refresh(server->log);
    size_t i = 0;
    while (i < server->waiting_count) {
        struct waiting parked = server->waiting[i];
        struct reader *reader = find_reader(server, parked.fh);
        if (reader == NULL || reader->next_record >= server->log->count) {
            i++;
            continue;
        }
        memmove(&server->waiting[i], &server->waiting[i + 1],
                (server->waiting_count - i - 1) * sizeof *server->waiting);
        server->waiting_count--;
        answer_read(server, parked.unique, parked.fh, parked.size); /* has a record: answered, not parked */
    }
}

bool server_has_waiting(const struct server *server)
{
    return server->waiting_count > 0;
}

int server_fd(const struct server *server)
{
    return server->fd;
}

struct server *server_mount(const char *target, struct log_file *log)
{
    struct server *server = calloc(1, sizeof *server);
    if (server == NULL)
        return NULL;
    server->target = target;
    server->log = log;
    server->next_fh = 1;
    server->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (server->fd < 0)
        goto failed;
    struct stat st;
    if (lstat(target, &st) != 0) { /* a mount needs a file to cover */
        int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            goto failed;
        close(fd);
    }
    char options[256];
    snprintf(options, sizeof options, "fd=%d,rootmode=%o,user_id=%u,group_id=%u,allow_other", server->fd,
             FILE_MODE, (unsigned)getuid(), (unsigned)getgid());
    if (mount(PROGRAM, target, "fuse", MS_NOSUID | MS_NODEV, options) != 0)
        goto failed;
    return server;
failed:;
    int saved = errno;
    if (server->fd >= 0)
        close(server->fd);
    free(server);
    errno = saved;
    return NULL;
}

void server_close(struct server *server, bool unmount)
{
    if (unmount && umount2(server->target, MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
        say("cannot unmount %s (%s)", server->target, strerror(errno));
    close(server->fd);
    free(server->readers);
    free(server->waiting);
    free(server);
}

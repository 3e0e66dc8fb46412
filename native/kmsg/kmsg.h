/* mokka-kmsg: the node's kernel log served at /dev/kmsg one record per read(), and written to the host's. */
#ifndef MOKKA_KMSG_H
#define MOKKA_KMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "service.h" /* say, atomic_write */

#define PROGRAM "mokka-kmsg"

/* What is left to read of fd, with room for one byte more; NULL with errno set. */
char *read_whole(int fd, size_t *len);

/* ---- log.c: the staged log's records, read again only when the file changed ---- */
struct record {
    const char *text; /* the record with its newline */
    size_t len;
};
struct log_file {
    const char *path;
    bool stamped; /* dev, ino, mtime and size below are the read file's */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int problem; /* the errno last said, 0 if none */
    char *data;
    struct record *records;
    size_t count;
};
void log_init(struct log_file *log, const char *path);
void log_refresh(struct log_file *log);
size_t log_bytes(const struct log_file *log);

/* ---- server.c: the FUSE file at the target, one record per read ---- */
struct server;
/* Mounted over target (created if missing); NULL with errno set if it cannot be. */
struct server *server_mount(const char *target, struct log_file *log);
int server_fd(const struct server *server);
/* Answer one request; false once the kernel says the mount is gone. */
bool server_handle(struct server *server);
/* Answer the waiting readers that have a record now. */
void server_wake(struct server *server);
bool server_has_waiting(const struct server *server);
/* Unmount (if still mounted) and free. */
void server_close(struct server *server, bool unmount);

/* ---- forward.c: each record of the node's log written once to the host's kernel log ---- */
struct forwarder;
struct forwarder *forwarder_new(struct log_file *log, const char *target, const char *state, size_t skip);
void forwarder_start(struct forwarder *forwarder);
void forwarder_step(struct forwarder *forwarder);

#endif

/* The node's kernel log written to the host's too (mokka node up --host-kmsg): each record once, in order.
 *
 * The kernel takes one record per write(2) to /dev/kmsg, "<level>text" (Documentation/ABI/testing/
 * dev-kmsg); it keeps the level and files the record under facility user.  The last record written is
 * kept in the node's state (NodeStore.kernel_log_forwarded), so a restarted service goes on after it;
 * teardown removes it with the node's log.  A target that cannot be written is said once; its records
 * wait for it, the node's own log keeps them meanwhile.  The driver's loading lines are never written:
 * the host's log has its own boot. */
#include "kmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* never created (the host has it or not); appended to, should it be a plain file */
#define TARGET_FLAGS (O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

struct forwarder {
    struct log_file *log;
    const char *target, *state;
    size_t skip; /* the driver's loading lines at the start of every log */
    char *last;  /* the last record written, NULL if none */
    size_t last_len;
    bool target_blocked;
    char problem[1024]; /* the last one said */
};

/* Say a problem once, not at every step while it lasts. */
static void say_once(struct forwarder *forwarder, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void say_once(struct forwarder *forwarder, const char *format, ...)
{
    char text[sizeof forwarder->problem];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    if (strcmp(text, forwarder->problem) != 0) {
        say("%s", text);
        memcpy(forwarder->problem, text, sizeof text);
    }
}

static void blocked(struct forwarder *forwarder, int error)
{
    forwarder->target_blocked = true;
    say_once(forwarder,
             "cannot write the host's kernel log %s (%s); the node's records stay in its own log %s and are "
             "written once it can be",
             forwarder->target, strerror(error), forwarder->log->path);
}

/* Field n (from 0) of a record "pri,seq,usec,flags;text" as a number; false if it is not one. */
static bool field(const char *record, size_t len, int n, uint64_t *value)
{
    const char *end = memchr(record, ';', len);
    end = end ? end : record + len;
    for (; n > 0 && record < end; n--) {
        const char *comma = memchr(record, ',', (size_t)(end - record));
        if (comma == NULL)
            return false;
        record = comma + 1;
    }
    uint64_t number = 0;
    const char *digit = record;
    for (; digit < end && *digit >= '0' && *digit <= '9'; digit++) {
        if (number > (UINT64_MAX - 9) / 10)
            return false;
        number = number * 10 + (uint64_t)(*digit - '0');
    }
    if (n > 0 || digit == record || (digit < end && *digit != ','))
        return false;
    *value = number;
    return true;
}

struct forwarder *forwarder_new(struct log_file *log, const char *target, const char *state, size_t skip)
{
    struct forwarder *forwarder = calloc(1, sizeof *forwarder);
    if (forwarder == NULL)
        return NULL;
    *forwarder = (struct forwarder){.log = log, .target = target, .state = state, .skip = skip};
    int fd = open(state, O_RDONLY | O_CLOEXEC);
    size_t len = 0;
    char *last = fd >= 0 ? read_whole(fd, &len) : NULL;
    int error = errno;
    if (fd >= 0)
        close(fd);
    if (last == NULL && error != ENOENT)
        say_once(forwarder, "cannot read the last record written from %s (%s); writing the node's whole log",
                 state, strerror(error));
    if (last != NULL && len == 0) {
        free(last);
        last = NULL;
    }
    forwarder->last = last;
    forwarder->last_len = len;
    return forwarder;
}

void forwarder_start(struct forwarder *forwarder)
{
    int fd = open(forwarder->target, TARGET_FLAGS);
    if (fd < 0) {
        blocked(forwarder, errno);
        return;
    }
    close(fd);
    say("writing the node's kernel log to the host's kernel log %s too", forwarder->target);
}

/* Where the records after the last one written start: at its place, else none (pending_later says which). */
static bool after_last(struct forwarder *forwarder, size_t *first)
{
    const struct log_file *log = forwarder->log;
    if (forwarder->last == NULL) {
        *first = log->count < forwarder->skip ? log->count : forwarder->skip;
        return true;
    }
    uint64_t seq;
    if (!field(forwarder->last, forwarder->last_len, 1, &seq))
        return false;
    if (seq > 0 && seq <= log->count && log->records[seq - 1].len == forwarder->last_len &&
        memcmp(log->records[seq - 1].text, forwarder->last, forwarder->last_len) == 0) {
        *first = (size_t)seq;
        return true;
    }
    return false;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Copy a record's text, turning the \xHH escapes /dev/kmsg shows (a line break inside a record: \x0a) back into
 * the bytes the kernel took; the length copied. */
static size_t unescape(char *out, const char *text, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\\' && i + 3 < len && text[i + 1] == 'x'
            && hex_digit(text[i + 2]) >= 0 && hex_digit(text[i + 3]) >= 0) {
            out[n++] = (char)(hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]));
            i += 3;
        } else {
            out[n++] = text[i];
        }
    }
    return n;
}

/* Write one record as the kernel takes a write to /dev/kmsg: "<pri>text"; false if the target refused. */
static bool write_record(struct forwarder *forwarder, const struct record *record)
{
    const char *semicolon = memchr(record->text, ';', record->len);
    const char *fields_end = semicolon ? semicolon : record->text + record->len;
    const char *comma = memchr(record->text, ',', (size_t)(fields_end - record->text));
    size_t pri = (size_t)((comma ? comma : fields_end) - record->text);
    size_t text = semicolon ? record->len - (size_t)(semicolon + 1 - record->text) : 0;
    char *line = malloc(pri + text + 2);
    if (line == NULL) {
        blocked(forwarder, ENOMEM);
        return false;
    }
    line[0] = '<';
    memcpy(line + 1, record->text, pri);
    line[pri + 1] = '>';
    size_t length = pri + 2 + unescape(line + pri + 2, semicolon ? semicolon + 1 : "", text);
    /* a fresh open per record: the kernel rate-limits each open file to 10 records in 5 s, drops the rest */
    int fd = open(forwarder->target, TARGET_FLAGS);
    bool written = fd >= 0 && write(fd, line, length) >= 0;
    int error = errno;
    if (fd >= 0)
        close(fd);
    free(line);
    if (!written)
        blocked(forwarder, error);
    return written;
}

static bool forward(struct forwarder *forwarder, const struct record *record)
{
    if (!write_record(forwarder, record))
        return false;
    if (forwarder->target_blocked) {
        say("%s takes records again", forwarder->target);
        forwarder->target_blocked = false;
        forwarder->problem[0] = '\0';
    }
    char *last = realloc(forwarder->last, record->len); /* kept here too: an unsaved state must not repeat it */
    if (last != NULL) {
        memcpy(last, record->text, record->len);
        forwarder->last = last;
        forwarder->last_len = record->len;
    }
    if (atomic_write(forwarder->state, record->text, record->len, 0644) != 0)
        say_once(forwarder, "cannot keep the last record written in %s (%s); a restart may write it again",
                 forwarder->state, strerror(errno));
    return true;
}

void forwarder_step(struct forwarder *forwarder)
{
    log_refresh(forwarder->log);
    const struct log_file *log = forwarder->log;
    size_t first;
    if (after_last(forwarder, &first)) {
        for (size_t i = first; i < log->count; i++)
            if (!forward(forwarder, &log->records[i]))
                return;
        return;
    }
    /* the last one written is not at its place: the log was cut and numbered anew (nvml-mock-ctl reset);
     * those stamped later than it are the new ones */
    uint64_t last_usec, usec;
    if (!field(forwarder->last, forwarder->last_len, 2, &last_usec)) {
        say_once(forwarder, "forwarding failed: the last record written, in %s, is not a kernel log record",
                 forwarder->state);
        return;
    }
    for (size_t i = 0; i < log->count; i++) {
        if (!field(log->records[i].text, log->records[i].len, 2, &usec)) {
            say_once(forwarder, "forwarding failed: record %zu of %s is not a kernel log record", i + 1,
                     log->path);
            return;
        }
    }
    for (size_t i = 0; i < log->count; i++)
        if (field(log->records[i].text, log->records[i].len, 2, &usec) && usec > last_usec &&
            !forward(forwarder, &log->records[i]))
            return;
}

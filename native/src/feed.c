/* The state feed (native/README.md, "The state feed"): a SOCK_SEQPACKET connection to the node's service.
 * Each message from it is the text "mokka-nvml-fds 1 state" with one descriptor (SCM_RIGHTS) of the state
 * file, or "mokka-nvml-fds 1 state settings" with that and one of the setter record; the library answers
 * each message with one byte, after which the service may send the next. Anything else (other text, other
 * control messages, a truncated one, a descriptor that is not a regular file) is closed and ignored: the
 * peer cannot make this process hold a directory, block, or crash. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "feed.h"
#include "log.h"

#define MAGIC "mokka-nvml-fds 1"
#define MAX_FDS 8            /* room for more than a valid message carries: extra ones arrive, and are closed */
#define MAX_DRAIN 64         /* messages taken per call at most */
#define REDIAL_NS 1000000000ull

static const char *const sockets[] = {MK_FEED_SOCKET, MK_FEED_SOCKET_VAR};
static const char *dialled;  /* the socket chosen: the first that answered, else the first that is there */
static int conn = -1, state_fd = -1, settings_fd = -1, dial_errno;
static uint64_t redial_at;
static int ever_received, said_bad;

static int dial(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        dial_errno = errno;
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

const char *mk_feed_connect(void) {
    const char *there = NULL;
    for (size_t i = 0; i < sizeof sockets / sizeof *sockets; i++) {
        if ((conn = dial(sockets[i])) >= 0) return dialled = sockets[i];
        if (there == NULL && dial_errno != ENOENT && dial_errno != ENOTDIR) there = sockets[i];
    }
    return dialled = there; /* a socket that is there but does not answer (now): dialled again later */
}

int mk_feed_errno(void) { return state_fd < 0 && conn < 0 ? dial_errno : ENOENT; }
int mk_feed_state_fd(void) { return state_fd; }
int mk_feed_settings_fd(void) { return settings_fd; }

void mk_feed_after_fork(void) {
    if (conn >= 0) close(conn);
    conn = -1;
    redial_at = 0;
}

static void close_all(const int *fds, size_t n) {
    for (size_t i = 0; i < n; i++) close(fds[i]);
}

static int regular(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

/* why a message is not a valid one (NULL: valid) */
static const char *judge(const struct msghdr *msg, size_t len, const char *text, const int *fds, size_t nfds,
                         int foreign) {
    static const char one[] = MAGIC " state", two[] = MAGIC " state settings";
    if (msg->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return "truncated";
    if (foreign) return "a control message other than descriptors";
    size_t want = len == sizeof one - 1 && memcmp(text, one, len) == 0   ? 1
                : len == sizeof two - 1 && memcmp(text, two, len) == 0 ? 2
                                                                        : 0;
    if (want == 0) return "not a descriptor message";
    if (nfds != want) return "wrong number of descriptors";
    for (size_t i = 0; i < nfds; i++)
        if (!regular(fds[i])) return "a descriptor that is not a regular file";
    return NULL;
}

/* one message: 1 taken (valid or not), 0 none waiting, -1 the connection is gone */
static int take_one(int *fresh) {
    char text[64];
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    } control;
    struct iovec iov = {text, sizeof text};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    ssize_t n;
    do n = recvmsg(conn, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    int fds[MAX_FDS];
    size_t nfds = 0;
    int foreign = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            foreign = 1;
            continue;
        }
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count && nfds < MAX_FDS; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    if (n == 0 && nfds == 0) return -1; /* end of the connection (the service sends no empty message) */
    const char *bad = judge(&msg, (size_t)n, text, fds, nfds, foreign);
    if (bad != NULL) {
        close_all(fds, nfds);
        if (!said_bad) mk_log("state feed %s: message ignored: %s", dialled, bad);
        said_bad = 1;
    } else {
        if (state_fd >= 0) close(state_fd);
        if (settings_fd >= 0) close(settings_fd);
        state_fd = fds[0];
        settings_fd = nfds == 2 ? fds[1] : -1;
        ever_received = *fresh = 1;
    }
    send(conn, "r", 1, MSG_DONTWAIT | MSG_NOSIGNAL); /* read: the service may send the next */
    return 1;
}

int mk_feed_receive(uint64_t now, int wait_ms) {
    int first = wait_ms > 0 && !ever_received;
    if (conn < 0 && dialled != NULL && first) {
        for (int waited = 0; (conn = dial(dialled)) < 0 && waited < wait_ms; waited += 10) {
            struct timespec pause = {0, 10000000};
            nanosleep(&pause, NULL);
        }
    } else if (conn < 0 && dialled != NULL && now >= redial_at) {
        redial_at = now + REDIAL_NS;
        conn = dial(dialled);
    }
    if (conn < 0) return 0;
    if (first) {
        struct pollfd p = {.fd = conn, .events = POLLIN};
        while (poll(&p, 1, wait_ms) < 0 && errno == EINTR) {}
    }
    int fresh = 0;
    for (int i = 0; i < MAX_DRAIN; i++) {
        int r = take_one(&fresh);
        if (r == 0) break;
        if (r < 0) {
            close(conn);
            conn = -1;
            redial_at = now + REDIAL_NS;
            break;
        }
    }
    return fresh;
}

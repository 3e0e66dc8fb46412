/* mokka-persistenced: the node's NVML state for processes that see only the driver's files (GPU containers).
 *
 *   mokka-persistenced --root ROOT --state PATH --settings PATH --socket PATH
 *
 * PATHs are relative to ROOT (the gpu surface passes them: mokka_core.stage.paths.NVML_STATE_FILE, ...).
 * A real driver node runs nvidia-persistenced at ROOT/run/nvidia-persistenced/socket, and the NVIDIA
 * container toolkit mounts that socket into every GPU container; the library there has no state file beside
 * it and asks this socket instead (native/src/feed.c; native/README.md, "The state feed").  To each
 * connection it passes read-only descriptors of the state file and the setter record (SCM_RIGHTS on a
 * SOCK_SEQPACKET socket), and new ones whenever either is replaced: at most one message is in flight per
 * client; the client's one-byte answer lets the next go, so a client that never reads holds one message and
 * always gets the newest.  Only regular files are passed, never a directory (openat with .. would leave the
 * container's view).  The socket appears, mode 0666, once it listens (bound under a temp name, renamed into
 * place); SIGTERM or SIGINT remove it and exit 0.  Bad arguments exit 2, a socket it cannot serve 1.  Its
 * lines go to stdout, as every Mokka service's. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "service.h" /* say */

#define PROGRAM "mokka-persistenced"
const char program_name[] = PROGRAM;

#define MAGIC "mokka-nvml-fds 1"
#define MAX_CLIENTS 4096
#define CHECK_MS 1000 /* a stat a second besides inotify: a replaced directory, a missed event */

struct file {
    const char *path;
    int fd; /* -1: none (missing, not a regular file) */
    struct stat st;
};

struct client {
    int fd;
    bool in_flight; /* a message not answered yet */
    bool due;       /* the newest files are not sent yet */
};

static struct {
    struct file state, settings;
    int listener, inotify, watch;
    dev_t watched_dev;
    ino_t watched_ino;
    const char *dir; /* the state file's directory (the record's too) */
    struct client clients[MAX_CLIENTS];
    size_t nclients;
    ino_t socket_ino;
} g = {.listener = -1, .inotify = -1, .watch = -1};

static _Noreturn void usage_error(const char *problem, const char *value)
{
    fprintf(stderr, "usage: " PROGRAM " --root ROOT --state PATH --settings PATH --socket PATH\n" PROGRAM ": %s%s\n",
            problem, value);
    exit(2);
}

static const char *under_root(const char *option, const char *path)
{
    if (path == NULL)
        usage_error("missing ", option);
    const char *problem = not_under_root(path);
    if (problem != NULL)
        usage_error(option, problem);
    return path;
}

static char *parent_of(const char *path)
{
    char *dir = strdup(path);
    if (dir == NULL) {
        perror(PROGRAM);
        exit(1);
    }
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    return dir;
}

static bool same(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Open the file again if it is not the one held (replaced, rewritten, gone); true if that changed anything. */
static bool refresh(struct file *f)
{
    struct stat now;
    bool there = stat(f->path, &now) == 0 && S_ISREG(now.st_mode);
    if (there && f->fd >= 0 && same(&now, &f->st))
        return false;
    if (!there && f->fd < 0)
        return false;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (!there)
        return true;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return true;
    if (fstat(fd, &f->st) != 0 || !S_ISREG(f->st.st_mode)) { /* never a directory, a FIFO or a device */
        close(fd);
        return true;
    }
    f->fd = fd;
    return true;
}

static void drop(size_t i)
{
    close(g.clients[i].fd);
    g.clients[i] = g.clients[--g.nclients];
}

/* Send client i the files held (when it has no message in flight): false if it is gone. */
static bool send_files(size_t i)
{
    struct client *c = &g.clients[i];
    if (c->in_flight || g.state.fd < 0)
        return true;
    int fds[2] = {g.state.fd, g.settings.fd};
    size_t nfds = g.settings.fd >= 0 ? 2 : 1;
    const char *text = nfds == 2 ? MAGIC " state settings" : MAGIC " state";
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof fds)];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {(void *)text, strlen(text)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cmsg), fds, nfds * sizeof(int));
    ssize_t sent;
    do
        sent = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent >= 0) {
        c->in_flight = true;
        c->due = false;
        return true;
    }
    /* full, or too many descriptors in flight: sent at the next check */
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == ETOOMANYREFS || errno == ENOBUFS ||
           errno == ENOMEM;
}

static void send_due(void)
{
    for (size_t i = 0; i < g.nclients;)
        if (g.clients[i].due && !send_files(i))
            drop(i);
        else
            i++;
}

static void watch_dir(void)
{
    struct stat st;
    if (stat(g.dir, &st) != 0 || (g.watch >= 0 && st.st_dev == g.watched_dev && st.st_ino == g.watched_ino))
        return;
    if (g.watch >= 0)
        inotify_rm_watch(g.inotify, g.watch);
    g.watch = inotify_add_watch(g.inotify, g.dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE |
                                                       IN_MOVED_FROM | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
    g.watched_dev = st.st_dev;
    g.watched_ino = st.st_ino;
}

static void check(void)
{
    watch_dir();
    bool changed = refresh(&g.state);
    changed = refresh(&g.settings) || changed;
    if (changed)
        for (size_t i = 0; i < g.nclients; i++)
            g.clients[i].due = true;
    send_due();
}

static void accept_clients(void)
{
    for (;;) {
        int fd = accept4(g.listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return;
        if (g.nclients == MAX_CLIENTS) {
            close(fd);
            continue;
        }
        g.clients[g.nclients++] = (struct client){.fd = fd, .due = true};
        if (!send_files(g.nclients - 1))
            drop(g.nclients - 1);
    }
}

/* What client i said: any message answers the one in flight (descriptors it sends are never taken). */
static void hear(size_t i)
{
    char buf[64];
    for (int taken = 0; taken < 64; taken++) { /* a client that never stops talking waits for the next round */
        ssize_t n = recv(g.clients[i].fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            g.clients[i].in_flight = false;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        drop(i);
        return;
    }
    if (g.clients[i].due && !send_files(i))
        drop(i);
}

static void make_parents(char *path)
{
    for (char *slash = strchr(path + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755);
        *slash = '/';
    }
}

/* Listen at socket_path: bound in its directory under a temp name, made 0666 and renamed into place. */
static int listen_at(char *socket_path)
{
    make_parents(socket_path);
    char *dir = parent_of(socket_path);
    const char *name = strrchr(socket_path, '/') + 1;
    if (chdir(dir) != 0) /* bound by a name relative to it: a root's path may be longer than sun_path */
        return -1;
    free(dir);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    snprintf(address.sun_path, sizeof address.sun_path, ".%s.%d.tmp", name, (int)getpid());
    unlink(address.sun_path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct stat st;
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (listen(fd, 128) != 0 || chmod(address.sun_path, 0666) != 0 || lstat(address.sun_path, &st) != 0 ||
        rename(address.sun_path, name) != 0) {
        int saved = errno;
        unlink(address.sun_path);
        close(fd);
        errno = saved;
        return -1;
    }
    g.socket_ino = st.st_ino;
    return fd;
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    static const struct option known[] = {
        {"root", required_argument, NULL, 'r'},     {"state", required_argument, NULL, 's'},
        {"settings", required_argument, NULL, 'e'}, {"socket", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    const char *root = NULL, *state = NULL, *settings = NULL, *socket_rel = NULL;
    for (int c; (c = getopt_long(argc, argv, "", known, NULL)) != -1;) {
        switch (c) {
        case 'r': root = optarg; break;
        case 's': state = optarg; break;
        case 'e': settings = optarg; break;
        case 'k': socket_rel = optarg; break;
        default: usage_error("unknown option", "");
        }
    }
    if (optind < argc)
        usage_error("unexpected argument ", argv[optind]);
    if (root == NULL || root[0] == '\0')
        usage_error("missing ", "--root");
    char real_root[PATH_MAX];
    if (realpath(root, real_root) == NULL) {
        fprintf(stderr, PROGRAM ": root %s: %s\n", root, strerror(errno));
        return 1;
    }
    g.state = (struct file){join_root(real_root, under_root("--state", state)), -1, {0}};
    g.settings = (struct file){join_root(real_root, under_root("--settings", settings)), -1, {0}};
    char *socket_path = join_root(real_root, under_root("--socket", socket_rel));
    g.dir = parent_of(g.state.path);

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max; /* the descriptors in flight count against it */
        setrlimit(RLIMIT_NOFILE, &files);
    }
    g.inotify = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (stop_fd < 0 || g.inotify < 0) {
        fprintf(stderr, PROGRAM ": %s\n", strerror(errno));
        return 1;
    }
    check();
    if ((g.listener = listen_at(socket_path)) < 0) {
        fprintf(stderr, PROGRAM ": cannot serve on %s: %s\n", socket_path, strerror(errno));
        return 1;
    }
    say("serving %s (state %s)", socket_path, g.state.path);

    static struct pollfd fds[3 + MAX_CLIENTS];
    long long next_check = now_ms() + CHECK_MS;
    for (;;) {
        fds[0] = (struct pollfd){.fd = stop_fd, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = g.inotify, .events = POLLIN};
        fds[2] = (struct pollfd){.fd = g.listener, .events = POLLIN};
        size_t watched = g.nclients;
        for (size_t i = 0; i < watched; i++)
            fds[3 + i] = (struct pollfd){.fd = g.clients[i].fd, .events = POLLIN};
        long long wait = next_check - now_ms();
        int ready = poll(fds, 3 + watched, wait < 0 ? 0 : (int)wait);
        if (ready < 0 && errno != EINTR) {
            fprintf(stderr, PROGRAM ": poll: %s\n", strerror(errno));
            break;
        }
        if (ready > 0 && fds[0].revents)
            break;
        bool changed = false;
        if (ready > 0 && fds[1].revents) {
            char events[4096];
            while (read(g.inotify, events, sizeof events) > 0)
                changed = true;
        }
        /* clients from the back: drop() moves the last one into the place it frees */
        for (size_t i = watched; ready > 0 && i-- > 0;)
            if (fds[3 + i].revents)
                hear(i);
        if (ready > 0 && fds[2].revents)
            accept_clients();
        if (changed || now_ms() >= next_check) {
            check();
            next_check = now_ms() + CHECK_MS;
        }
    }
    struct stat st;
    if (lstat(socket_path, &st) == 0 && st.st_ino == g.socket_ino) /* not one a newer instance bound */
        unlink(socket_path);
    return 0;
}

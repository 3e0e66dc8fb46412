/* mokka-kmsg: the node's kernel log at /dev/kmsg, one record per read(), as the kernel serves it.
 *
 *   mokka-kmsg --root ROOT --log PATH --ready PATH --forwarded PATH --loading-records N [--host-kmsg TARGET]
 *
 * PATHs are relative to ROOT; the gpu surface passes them (mokka_core.stage.store.KERNEL_LOG, ...).
 * It serves only where ROOT is shown at the real paths (inside mokka run, where /dev is ROOT's); elsewhere
 * (mokka node up --root DIR) it idles, and on the host itself (ROOT /) it never covers the host's own
 * kernel log.  With --host-kmsg it also writes the node's records to the host's kernel log, wherever ROOT
 * is.  Once it serves (and has written what the log held to the host's), the READY file holds its pid;
 * SIGTERM or SIGINT unmounts, removes it and exits 0.  Bad arguments exit 2, a READY it cannot write 1.
 * Its lines go to stdout, as every Mokka service's. */
#include "kmsg.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define KMSG "/dev/kmsg"
#define WAITING_POLL_MS 200 /* a waiting reader sees a new record within this */
#define FORWARD_POLL_MS 1000 /* a stat a second: an idle node stays cheap, a log watcher sees an Xid in 1 s */

struct options {
    const char *root, *log, *ready, *forwarded, *host_kmsg;
    long loading_records;
};

static void usage_error(const char *problem, const char *value)
{
    fprintf(stderr,
            "usage: " PROGRAM " --root ROOT --log PATH --ready PATH --forwarded PATH --loading-records N "
            "[--host-kmsg TARGET]\n" PROGRAM ": %s%s\n",
            problem, value);
    exit(2);
}

/* A path under the root, as the surface passes them: relative, without "..". */
static const char *under_root(const char *option, const char *path)
{
    if (path == NULL)
        usage_error("missing ", option);
    const char *problem = not_under_root(path);
    if (problem != NULL)
        usage_error(option, problem);
    return path;
}

static struct options parse(int argc, char **argv)
{
    static const struct option known[] = {
        {"root", required_argument, NULL, 'r'},      {"log", required_argument, NULL, 'l'},
        {"ready", required_argument, NULL, 'y'},     {"forwarded", required_argument, NULL, 'f'},
        {"loading-records", required_argument, NULL, 'n'}, {"host-kmsg", required_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct options options = {.loading_records = -1};
    const char *loading = NULL;
    for (int c; (c = getopt_long(argc, argv, "", known, NULL)) != -1;) {
        switch (c) {
        case 'r': options.root = optarg; break;
        case 'l': options.log = optarg; break;
        case 'y': options.ready = optarg; break;
        case 'f': options.forwarded = optarg; break;
        case 'n': loading = optarg; break;
        case 'h': options.host_kmsg = optarg; break;
        default: usage_error("unknown option", "");
        }
    }
    if (optind < argc)
        usage_error("unexpected argument ", argv[optind]);
    if (options.root == NULL || options.root[0] == '\0')
        usage_error("missing ", "--root");
    under_root("--log", options.log);
    under_root("--ready", options.ready);
    under_root("--forwarded", options.forwarded);
    char *end = NULL;
    options.loading_records = loading ? strtol(loading, &end, 10) : -1;
    if (loading == NULL || *loading == '\0' || *end != '\0' || options.loading_records < 0)
        usage_error("--loading-records must be a number of records, not ", loading ? loading : "missing");
    return options;
}

/* Whether this process sees ROOT at the real paths: its /dev is ROOT's, and ROOT is not /. */
static bool shown_at_real_paths(const char *root)
{
    char real[PATH_MAX];
    struct stat ours, real_dev;
    if (realpath(root, real) == NULL || strcmp(real, "/") == 0)
        return false;
    char *dev = join_root(root, "dev");
    bool same = stat(dev, &ours) == 0 && stat("/dev", &real_dev) == 0 && ours.st_dev == real_dev.st_dev &&
                ours.st_ino == real_dev.st_ino;
    free(dev);
    return same;
}

static void make_parents(char *path)
{
    for (char *slash = strchr(path + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0755);
        *slash = '/';
    }
}

static long long now_ms(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
    struct options options = parse(argc, argv);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    int stop_fd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    if (stop_fd < 0) {
        fprintf(stderr, PROGRAM ": signalfd: %s\n", strerror(errno));
        return 1;
    }

    char *root = join_root(options.root, NULL);
    struct log_file log;
    log_init(&log, join_root(options.root, options.log));
    struct server *server = NULL;
    if (!shown_at_real_paths(options.root)) {
        say("%s is not shown at the real paths here; the kernel log stays at %s", root, log.path);
    } else if ((server = server_mount(KMSG, &log)) == NULL) {
        say("cannot serve " KMSG " (%s); it reads as a plain file of the log", strerror(errno));
    }
    struct forwarder *forwarder = NULL;
    if (options.host_kmsg != NULL) {
        forwarder = forwarder_new(&log, options.host_kmsg, join_root(options.root, options.forwarded),
                                  (size_t)options.loading_records);
        if (forwarder == NULL) {
            perror(PROGRAM);
            return 1;
        }
        forwarder_start(forwarder);
        forwarder_step(forwarder); /* ready means: what the log held at start is written, where it can be */
    }

    char *ready = join_root(options.root, options.ready);
    char pid[32];
    int pid_len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    make_parents(ready);
    if (atomic_write(ready, pid, (size_t)pid_len, 0644) != 0) {
        fprintf(stderr, PROGRAM ": cannot write the readiness file %s (%s)\n", ready, strerror(errno));
        if (server != NULL)
            server_close(server, true);
        return 1;
    }

    long long next_step = now_ms() + FORWARD_POLL_MS;
    for (;;) {
        int timeout = -1;
        if (server != NULL && server_has_waiting(server))
            timeout = WAITING_POLL_MS;
        if (forwarder != NULL) {
            long long until = next_step - now_ms();
            until = until < 0 ? 0 : until;
            timeout = timeout < 0 || until < timeout ? (int)until : timeout;
        }
        struct pollfd fds[2] = {{.fd = stop_fd, .events = POLLIN}, {.fd = server ? server_fd(server) : -1,
                                                                    .events = POLLIN}};
        int ready_count = poll(fds, 2, timeout);
        if (ready_count < 0 && errno != EINTR) {
            fprintf(stderr, PROGRAM ": poll: %s\n", strerror(errno));
            break;
        }
        if (ready_count > 0 && fds[0].revents)
            break;
        if (server != NULL && ready_count > 0 && fds[1].revents) {
            if (!server_handle(server)) {
                server_close(server, false); /* unmounted already */
                server = NULL;
            }
        }
        if (server != NULL)
            server_wake(server);
        if (forwarder != NULL && now_ms() >= next_step) {
            forwarder_step(forwarder);
            next_step = now_ms() + FORWARD_POLL_MS;
        }
    }
    if (server != NULL)
        server_close(server, true);
    unlink(ready);
    return 0;
}

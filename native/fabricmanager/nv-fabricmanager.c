/*
 * nv-fabricmanager: the fake NVIDIA fabric manager of a simulated node.
 *
 * The real daemon trains the NVSwitch fabric, after which the driver reports the GPUs' fabric
 * state "Completed".  Here "trained" is a marker file under the root (its pid) that the mock
 * libnvidia-ml follows: written after the init delay, re-asserted every 2 s (deleted by hand, it
 * comes back), removed at start (a killed daemon's says nothing about this one) and on
 * SIGTERM/SIGINT.  --failed: it runs but never gets there, as a fabric manager stuck in training.
 *
 * A foreground daemon by supervisord's rules: log lines on stdout, exit 0 on SIGTERM/SIGINT, exit 1
 * at once on bad input (one line on stderr naming the option), 2 on a usage error.  The signals are
 * blocked from the start and taken synchronously (sigtimedwait) by the one wait.  Paths under the root
 * come from mokka-core's layout (fm_paths.h, generated); the marker is written as
 * mokka_core.stage.store.atomic_write writes (temp ".NAME.<12 hex>.tmp" beside it, renamed over it).
 * --version is the node's driver version, which needs its profile resolved: the sim-fabricmanager
 * command `nv-fabricmanager` answers it (mokka_core.node.foreground.print_version) and execs this
 * program for everything else.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fm_paths.h"
#include "service.h" /* say, atomic_write */

#define PROGRAM "nv-fabricmanager"

const char program_name[] = PROGRAM;
#define INIT_DELAY_ENV "MOKKA_FABRICMANAGER_INIT_DELAY_SEC"
#define REASSERT_SECONDS 2.0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define USAGE "usage: " PROGRAM " [-h] [-c CONFIG] [--root ROOT] [--init-delay SECONDS] [--failed]\n"

static const char HELP[] =
    USAGE
    "\n"
    "Fake NVIDIA fabric manager of a simulated node: after the init delay it writes its readiness\n"
    "marker ROOT/" MK_FABRICMANAGER_READY " (its pid), re-asserts it every 2 s and\n"
    "removes it on SIGTERM/SIGINT; while it exists the node's fabric GPUs show fabric state Completed.\n"
    "\n"
    "options:\n"
    "  -h, --help            show this help message and exit\n"
    "  -c, --config CONFIG   fabric manager config file (accepted and ignored)\n"
    "  --root ROOT           staged root (default: $MOKKA_ROOT, else a cluster node's root " MK_CLUSTER_ROOT ",\n"
    "                        else a node staged at /)\n"
    "  --init-delay SECONDS  seconds before ready ($" INIT_DELAY_ENV ", default 0)\n"
    "  --failed              never become ready (fabric stuck in training)\n"
    "\n"
    "-v/--version is answered by mokka-sim-fabricmanager's nv-fabricmanager command (the node's driver\n"
    "version), which runs this program for everything else.\n"
    "\n"
    "Example: " PROGRAM " --root /tmp/node --init-delay 5 -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n";

static sigset_t stop_signals;
static bool stopped;

static _Noreturn void die(int status, const char *fmt, ...)
{
    va_list ap;
    fputs(PROGRAM ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(status);
}

static _Noreturn void usage_error(const char *fmt, const char *what)
{
    fputs(USAGE, stderr);
    fprintf(stderr, PROGRAM ": error: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    exit(EXIT_USAGE);
}

/* ---- paths ------------------------------------------------------------------------------------ */

/* `path` spelled as Python's str(Path(path)) spells it (the daemon's log lines name the root so):
 * empty and "." components dropped, repeated slashes and a trailing one removed, "" -> ".". */
static void normalise(const char *path, char *out, size_t size)
{
    size_t n = 0;
    const char *p = path;
    if (p[0] == '/') {
        out[n++] = '/';
        if (p[1] == '/' && p[2] != '/') out[n++] = '/'; /* POSIX keeps exactly two leading slashes */
    }
    while (*p) {
        while (*p == '/') p++;
        const char *end = strchrnul(p, '/');
        size_t len = (size_t)(end - p);
        if (len && !(len == 1 && p[0] == '.')) {
            if (n + len + 2 > size) die(EXIT_FAILED, "root %s: path too long", path);
            if (n && out[n - 1] != '/') out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p = end;
    }
    if (!n) out[n++] = '.';
    out[n] = '\0';
}

/* `root` / `relative`, as pathlib joins them. */
static void under_root(const char *root, const char *relative, char *out, size_t size)
{
    int len = strcmp(root, ".") == 0 ? snprintf(out, size, "%s", relative)
              : root[strlen(root) - 1] == '/' ? snprintf(out, size, "%s%s", root, relative)
                                              : snprintf(out, size, "%s/%s", root, relative);
    if (len < 0 || (size_t)len >= size) die(EXIT_FAILED, "root %s: path too long", root);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* mokka_core.stage.paths.find_root: --root, else $MOKKA_ROOT, else a cluster node's root, else the node
 * staged at / itself. */
static const char *find_root(const char *explicit)
{
    static char node_file[PATH_MAX];
    const char *env = getenv("MOKKA_ROOT");
    if (explicit) return explicit;
    if (env && *env) return env;
    under_root(MK_CLUSTER_ROOT, MK_NODE_FILE, node_file, sizeof node_file);
    if (exists(node_file)) return MK_CLUSTER_ROOT;
    if (exists("/" MK_NODE_FILE)) return "/";
    die(EXIT_FAILED, "no node root: give --root DIR (--root / means this host itself), set $MOKKA_ROOT, "
                     "or run on a cluster node (a node staged under " MK_CLUSTER_ROOT ")");
}

/* ---- the marker ------------------------------------------------------------------------------- */

static void remove_marker(const char *marker)
{
    if (unlink(marker) != 0 && errno != ENOENT) die(EXIT_FAILED, "cannot remove %s: %s", marker, strerror(errno));
}

/* mkdir -p of the directory `path` is in (mode 0777 less the umask, as Path.mkdir(parents=True)). */
static int make_parents(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *slash = strchr(dir + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) return -1;
        *slash = '/';
    }
    return 0;
}

static void assert_marker(const char *marker)
{
    char pid[24];
    if (exists(marker)) return;
    snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (make_parents(marker) != 0 || atomic_write(marker, pid, strlen(pid), 0644) != 0) {
        int saved = errno;
        unlink(marker);
        die(EXIT_FAILED, "cannot write the ready marker %s: %s", marker, strerror(saved));
    }
}

/* ---- waiting ---------------------------------------------------------------------------------- */

/* Wait `seconds` (infinity, or past any deadline a clock can hold: for ever) or until SIGTERM/SIGINT;
 * true once a stop signal came. */
static bool wait_for_stop(double seconds)
{
    struct timespec now, deadline;
    if (stopped) return true;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (seconds > 1e15) {
        while (sigwaitinfo(&stop_signals, NULL) < 0) {}
        return stopped = true;
    }
    double whole = floor(seconds);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        struct timespec left = {deadline.tv_sec - now.tv_sec, deadline.tv_nsec - now.tv_nsec};
        if (left.tv_nsec < 0) {
            left.tv_sec--;
            left.tv_nsec += 1000000000L;
        }
        if (left.tv_sec < 0) return false;
        if (sigtimedwait(&stop_signals, NULL, &left) >= 0) return stopped = true;
        if (errno == EAGAIN) return false;
    }
}

/* ---- options ---------------------------------------------------------------------------------- */

/* `text` quoted as Python's repr() quotes a str (the messages say what was given). */
static const char *quoted(const char *text)
{
    static char out[256];
    char quote = strchr(text, '\'') && !strchr(text, '"') ? '"' : '\'';
    size_t n = 0;
    out[n++] = quote;
    for (const char *p = text; *p && n < sizeof out - 6; p++) {
        if (*p == quote || *p == '\\') out[n++] = '\\';
        out[n++] = *p;
    }
    out[n++] = quote;
    out[n] = '\0';
    return out;
}

/* Seconds, as float() reads them (surrounding blanks allowed); not negative; "inf" waits for ever. */
static double parse_delay(const char *text, const char *source)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    while (end != text && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
    if (end == text || *end || isnan(value) || errno == ERANGE)
        die(EXIT_FAILED, "%s must be a number of seconds, got %s", source, quoted(text));
    if (value < 0) die(EXIT_FAILED, "%s must not be negative, got %s", source, quoted(text));
    return value;
}

struct options {
    const char *root;
    const char *init_delay;
    bool failed;
};

static struct options parse_options(int argc, char **argv)
{
    enum { OPT_ROOT = 256, OPT_INIT_DELAY, OPT_FAILED };
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'},  {"root", required_argument, NULL, OPT_ROOT},
        {"init-delay", required_argument, NULL, OPT_INIT_DELAY}, {"failed", no_argument, NULL, OPT_FAILED},
        {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'v'},
        {NULL, 0, NULL, 0},
    };
    struct options opts = {NULL, NULL, false};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+c:hv", longs, NULL)) != -1) {
        switch (opt) {
        case 'c': break; /* the real daemon's config file: nothing in it matters here */
        case OPT_ROOT: opts.root = optarg; break;
        case OPT_INIT_DELAY: opts.init_delay = optarg; break;
        case OPT_FAILED: opts.failed = true; break;
        case 'h': fputs(HELP, stdout); exit(0);
        case 'v':
            usage_error("%s: the version is the node's driver's; ask mokka-sim-fabricmanager's nv-fabricmanager",
                        "--version");
        default:
            if (optopt == 'c' || optopt >= OPT_ROOT) usage_error("argument %s: expected one argument", argv[optind - 1]);
            usage_error("unrecognized arguments: %s", argv[optind - 1]);
        }
    }
    if (optind < argc) usage_error("unrecognized arguments: %s", argv[optind]);
    return opts;
}

/* ---- the daemon ------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_signals, NULL); /* taken by wait_for_stop only: none is lost before it */
    signal(SIGPIPE, SIG_IGN);                     /* a closed log pipe must not take the fabric down */

    struct options opts = parse_options(argc, argv);
    const char *env_delay = getenv(INIT_DELAY_ENV);
    double delay = opts.init_delay ? parse_delay(opts.init_delay, "--init-delay")
                                   : parse_delay(env_delay && *env_delay ? env_delay : "0", INIT_DELAY_ENV);
    char root[PATH_MAX], marker[PATH_MAX];
    normalise(find_root(opts.root), root, sizeof root);
    under_root(root, MK_FABRICMANAGER_READY, marker, sizeof marker);

    remove_marker(marker);
    say("starting (root %s, init delay %gs%s)", root, delay,
        opts.failed ? ", failed: fabric never trains" : "");
    if (wait_for_stop(delay)) {
        say("clean shutdown");
        return 0;
    }
    if (opts.failed)
        say("fabric training in progress");
    else
        say("fabric trained; ready (%s)", marker);
    do {
        if (!opts.failed) assert_marker(marker);
    } while (!wait_for_stop(REASSERT_SECONDS));
    remove_marker(marker);
    say("clean shutdown");
    return 0;
}

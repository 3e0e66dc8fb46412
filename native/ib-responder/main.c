/* mokka-ib-responder: the MAD responder of one simulated node's HCAs, in the foreground.
 *
 *   mokka-ib-responder --node-file PATH --socket PATH [--listen HOST:PORT] [--fabric-dir DIR] [--peer HOST:PORT]...
 *
 * It stands in for the kernel's MAD layer and the fabric behind the HCAs: sim-ib's LD_PRELOAD shim connects
 * every opened /dev/infiniband/umad<n> to the Unix socket, and the responder answers what ibping, sminfo,
 * iblinkinfo, ibnetdiscover, smpquery and perfquery send (mad.c), asking other nodes' responders over TCP
 * where a MAD leaves the node (fabric.c).  One thread, one poll loop, sleeping until a socket, a due timeout
 * or a signal wakes it.  The socket appears once everything is up (the ready marker); SIGTERM or SIGINT
 * remove it and the fabric entry and exit 0.  A bad node file exits 1 before anything is bound, a usage
 * error 2.  Its lines go to stdout, as every Mokka service's. */
#include "responder.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_LISTEN "127.0.0.1:0"
#define DEFAULT_FABRIC_DIR "/run/mokka/ib-fabric"
#define MAX_TIMEOUT_MS 60000
#define PING_SERVER_TIMEOUT_MS 2000
#define MAX_JOBS 4096
#define MAX_PEER_OPTIONS 64

/* A request being answered, or an unanswered one's ETIMEDOUT waiting for its time. */
enum origin { FROM_TOOL, FROM_FABRIC };
enum wait { RUNNING, FOR_PEERS, FOR_RELAY, FOR_PING_SERVER, TIMING_OUT, DONE };
struct job {
    struct job *next;
    enum origin origin;
    enum wait wait;
    uint64_t client;       /* FROM_TOOL: the client's serial (it may be gone by the time the answer is) */
    uint32_t hca_index;    /* FROM_TOOL */
    struct conn *conn;     /* FROM_FABRIC */
    uint16_t source_lid;   /* FROM_FABRIC */
    uint64_t deadline;     /* FOR_PING_SERVER, TIMING_OUT */
    struct umad request;   /* TIMING_OUT: what goes back */
};

static struct {
    const char *node_path, *socket_path;
    struct node node;
    bool node_stamped;
    struct timespec node_mtime;
    ino_t node_ino;
    uint64_t activity;
    struct job *jobs;
    size_t njobs;
    bool serving;
} g;

const struct node *current_node(void) { return &g.node; }
uint64_t activity(void) { return g.activity; }

static bool stat_node(struct stat *st)
{
    return stat(g.node_path, st) == 0;
}

void node_refresh(void)
{
    struct stat st;
    if (!stat_node(&st) || (g.node_stamped && st.st_ino == g.node_ino && st.st_mtim.tv_sec == g.node_mtime.tv_sec &&
                            st.st_mtim.tv_nsec == g.node_mtime.tv_nsec))
        return;
    g.node_stamped = true;
    g.node_ino = st.st_ino;
    g.node_mtime = st.st_mtim;
    struct node fresh;
    char error[512];
    if (!node_load(g.node_path, &fresh, error, sizeof error)) {
        say("keeping the node as it was: %s", error);
        return;
    }
    node_free(&g.node);
    g.node = fresh;
    fabric_publish();
    say("reloaded %s", g.node_path);
}

/* ---- jobs: answering a request, which may wait for the fabric --------------------------------------- */

static void run_job(struct job *job, bool stale_ok);

static struct job *new_job(enum origin origin)
{
    struct job *job = g.njobs < MAX_JOBS ? calloc(1, sizeof *job) : NULL;
    if (job == NULL)
        return NULL;
    job->origin = origin;
    job->next = g.jobs;
    g.jobs = job;
    g.njobs++;
    return job;
}

/* The job's answer (NULL: none) to whoever asked; an unanswered tool's send comes back ETIMEDOUT later. */
static void complete(struct job *job, const struct umad *reply)
{
    job->wait = DONE;
    if (job->origin == FROM_FABRIC) {
        fabric_answer_ping(job->conn, reply);
        return;
    }
    struct client *c = client_by_serial(job->client);
    if (reply != NULL) {
        send_umad(c, reply);
    } else if (job->request.timeout_ms > 0) { /* what the kernel does with a send nothing answers */
        uint64_t delay = (uint64_t)job->request.timeout_ms * ((uint64_t)job->request.retries + 1);
        job->deadline = now_ms() + (delay < MAX_TIMEOUT_MS ? delay : MAX_TIMEOUT_MS);
        job->wait = TIMING_OUT;
    }
}

static void run_job(struct job *job, bool stale_ok)
{
    struct answer a;
    fabric_new_turn();
    if (job->origin == FROM_FABRIC) {
        memset(&a, 0, sizeof a);
        deliver_ping(&job->request, job->source_lid, &a);
    } else if (job->hca_index < g.node.nports) {
        answer_mad(&g.node.ports[job->hca_index], &job->request, stale_ok, &a);
    } else {
        a.kind = NO_ANSWER; /* the HCA went away with a re-staging */
    }
    switch (a.kind) {
    case NO_ANSWER: complete(job, NULL); break;
    case ANSWERED: complete(job, &a.reply); break;
    case NEED_PEERS: job->wait = FOR_PEERS; break;
    case RELAY:
        job->wait = FOR_RELAY;
        fabric_relay(job, a.peer, &job->request, a.relay_slid);
        break;
    case TO_PING_SERVER:
        if (!send_umad(a.server, &a.delivered)) {
            complete(job, NULL);
            break;
        }
        job->wait = FOR_PING_SERVER;
        job->deadline = now_ms() + PING_SERVER_TIMEOUT_MS;
        break;
    }
}

void job_relayed(struct job *job, const struct umad *answer) { complete(job, answer); }

void peers_found(void)
{
    for (struct job *job = g.jobs; job != NULL; job = job->next)
        if (job->wait == FOR_PEERS) {
            job->wait = RUNNING;
            run_job(job, true);
        }
}

void fabric_ping_arrived(struct conn *conn, const struct umad *request, uint16_t source_lid)
{
    node_refresh();
    struct job *job = new_job(FROM_FABRIC);
    if (job == NULL) {
        fabric_answer_ping(conn, NULL);
        return;
    }
    job->conn = conn;
    job->request = *request;
    job->source_lid = source_lid;
    run_job(job, false);
}

void tool_mad(struct client *c, const uint8_t *packet, size_t len)
{
    struct umad u;
    if (!umad_decode(packet, len, &u)) {
        say("dropping a %zu-byte packet: shorter than a MAD's headers", len);
        return;
    }
    g.activity++;
    if (mad_is_response(&u)) { /* a ping server on this node answered */
        for (struct job *job = g.jobs; job != NULL; job = job->next)
            if (job->wait == FOR_PING_SERVER && mad_tid(&job->request) == mad_tid(&u)) {
                struct umad back;
                ping_server_answered(&job->request, &u, &back);
                complete(job, &back);
                break;
            }
        return;
    }
    node_refresh();
    struct job *job = new_job(FROM_TOOL);
    if (job == NULL) {
        say("dropping a MAD: %d requests pending already", MAX_JOBS);
        return;
    }
    job->client = c->serial;
    job->hca_index = c->hca_index;
    job->request = u;
    run_job(job, false);
}

static void expire(uint64_t now)
{
    for (struct job *job = g.jobs; job != NULL; job = job->next) {
        if (job->deadline > now)
            continue;
        if (job->wait == FOR_PING_SERVER) {
            complete(job, NULL);
        } else if (job->wait == TIMING_OUT) {
            struct umad timed_out;
            umad_timed_out(&job->request, &timed_out);
            send_umad(client_by_serial(job->client), &timed_out);
            job->wait = DONE;
        }
    }
}

static uint64_t next_deadline(void)
{
    uint64_t earliest = fabric_deadline(), idle = shim_deadline();
    if (idle < earliest)
        earliest = idle;
    for (struct job *job = g.jobs; job != NULL; job = job->next)
        if ((job->wait == FOR_PING_SERVER || job->wait == TIMING_OUT) && job->deadline < earliest)
            earliest = job->deadline;
    return earliest;
}

static void sweep(void)
{
    for (struct job **at = &g.jobs; *at != NULL;) {
        struct job *job = *at;
        if (job->wait == DONE) {
            *at = job->next;
            free(job);
            g.njobs--;
        } else {
            at = &job->next;
        }
    }
    shim_sweep();
    fabric_sweep();
}

/* ---- start-up and the loop ---------------------------------------------------------------------------- */

static void usage(int status, const char *problem, const char *value)
{
    FILE *out = status ? stderr : stdout;
    if (problem != NULL)
        fprintf(out, PROGRAM ": %s%s\n", problem, value);
    fputs("usage: " PROGRAM " --node-file PATH --socket PATH [--listen HOST:PORT] [--fabric-dir DIR] "
          "[--peer HOST:PORT ...]\n", out);
    if (status == 0)
        fputs("\nMAD responder of a simulated node's HCAs (sim-ib; the shim's socket, the fabric's TCP port).\n\n"
              "  --node-file PATH     the node staged by sim-ib (var/lib/mokka/ib/node.conf under the root)\n"
              "  --socket PATH        the shim's Unix socket, created (var/lib/mokka/ib/responder.sock)\n"
              "  --listen HOST:PORT   TCP address for other nodes' responders (default: $MOKKA_IB_LISTEN, else "
              DEFAULT_LISTEN ")\n"
              "  --fabric-dir DIR     where responders of one machine find each other (default: "
              "$MOKKA_IB_FABRIC_DIR, else " DEFAULT_FABRIC_DIR ")\n"
              "  --peer HOST:PORT     another node's responder (repeatable; $MOKKA_IB_PEERS, comma-separated)\n"
              "  $MOKKA_IB_SOCKET_GROUP  a group (name or gid) whose members may use the socket (mode 0660)\n",
              out);
    exit(status);
}

int main(int argc, char **argv)
{
    static const struct option known[] = {
        {"node-file", required_argument, NULL, 'n'}, {"socket", required_argument, NULL, 's'},
        {"listen", required_argument, NULL, 'l'},    {"fabric-dir", required_argument, NULL, 'f'},
        {"peer", required_argument, NULL, 'p'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static struct address peers[MAX_PEER_OPTIONS];
    size_t npeers = 0;
    const char *listen_text = getenv("MOKKA_IB_LISTEN"), *fabric_dir = getenv("MOKKA_IB_FABRIC_DIR");
    if (listen_text == NULL || !listen_text[0])
        listen_text = DEFAULT_LISTEN;
    if (fabric_dir == NULL || !fabric_dir[0])
        fabric_dir = DEFAULT_FABRIC_DIR;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "h", known, NULL)) != -1;) {
        switch (c) {
        case 'n': g.node_path = optarg; break;
        case 's': g.socket_path = optarg; break;
        case 'l': listen_text = optarg; break;
        case 'f': fabric_dir = optarg; break;
        case 'p':
            if (npeers == MAX_PEER_OPTIONS || !parse_address(optarg, &peers[npeers++]))
                usage(2, "expected HOST:PORT (at most 64 peers), got ", optarg);
            break;
        case 'h': usage(0, NULL, NULL); break;
        default: usage(2, "bad option ", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage(2, "unexpected argument ", argv[optind]);
    if (g.node_path == NULL || g.socket_path == NULL)
        usage(2, "missing ", g.node_path == NULL ? "--node-file" : "--socket");
    const char *env_peers = getenv("MOKKA_IB_PEERS");
    for (const char *p = env_peers; p != NULL && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[300];
        if (len > 0) {
            snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one - 1 ? len : sizeof one - 1), p);
            if (npeers == MAX_PEER_OPTIONS || len >= sizeof one || !parse_address(one, &peers[npeers++]))
                usage(2, "MOKKA_IB_PEERS: expected HOST:PORT (at most 64 peers), got ", one);
        }
        p += len + (comma != NULL);
    }
    struct address listen_at;
    if (!parse_address(listen_text, &listen_at))
        usage(2, "expected HOST:PORT, got ", listen_text);

    /* the node first: a bad node file fails before anything is bound */
    char error[512];
    struct stat st;
    if (stat_node(&st)) {
        g.node_stamped = true;
        g.node_ino = st.st_ino;
        g.node_mtime = st.st_mtim;
    } else if (errno == ENOENT) {
        fprintf(stderr, PROGRAM ": %s: not staged (run `mokka-sim-ib stage` first)\n", g.node_path);
        return 1;
    }
    if (!node_load(g.node_path, &g.node, error, sizeof error)) {
        fprintf(stderr, PROGRAM ": %s\n", error);
        return 1;
    }
    long gid = shim_socket_group();

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    int signals = signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC);

    uint16_t tcp_port;
    if (!fabric_start(&listen_at, &tcp_port, error, sizeof error) ||
        !peers_start(fabric_dir, listen_at.host, tcp_port, peers, npeers, error, sizeof error)) {
        fprintf(stderr, PROGRAM ": %s\n", error);
        return 1;
    }
    if (!shim_listen(g.socket_path, gid))
        return 1;
    fabric_publish();
    say("serving %zu HCA(s) of %s on %s and %s:%u", g.node.nports, g.node.name, g.socket_path, listen_at.host,
        tcp_port);

    struct pollfd *fds = NULL;
    void **owners = NULL;
    size_t cap = 0;
    for (bool stopping = false; !stopping;) {
        size_t want = 1 + 1 + shim_clients() + 1 + 256;
        if (want > cap) {
            struct pollfd *more_fds = realloc(fds, want * sizeof *fds);
            void **more_owners = more_fds ? realloc(owners, want * sizeof *owners) : NULL;
            if (more_fds != NULL)
                fds = more_fds;
            if (more_owners != NULL)
                owners = more_owners, cap = want;
            if (more_owners == NULL) {
                say("out of memory");
                break;
            }
        }
        size_t n = 0;
        fds[n] = (struct pollfd){.fd = signals, .events = POLLIN}, owners[n++] = &signals;
        n += shim_pollfds(fds + n, owners + n, cap - n);
        size_t first_fabric = n;
        n += fabric_pollfds(fds + n, owners + n, cap - n);
        uint64_t deadline = next_deadline(), now = now_ms();
        int timeout = deadline == UINT64_MAX ? -1 : deadline <= now ? 0 : deadline - now > 60000 ? 60000
                                                                                           : (int)(deadline - now);
        int ready = poll(fds, n, timeout);
        if (ready < 0 && errno != EINTR) {
            say("poll: %s", strerror(errno));
            break;
        }
        for (size_t i = 0; ready > 0 && i < n; i++) {
            if (fds[i].revents == 0)
                continue;
            if (owners[i] == &signals) {
                struct signalfd_siginfo info;
                stopping = read(signals, &info, sizeof info) > 0;
            } else if (i < first_fabric) {
                shim_event(owners[i]);
            } else {
                fabric_event(owners[i]);
            }
            if (fabric_take_found())
                peers_found();
        }
        now = now_ms();
        expire(now);
        fabric_expire(now);
        shim_expire(now);
        if (fabric_take_found())
            peers_found();
        sweep();
    }
    shim_stop(g.socket_path);
    fabric_stop();
    fabric_withdraw();
    free(fds);
    free(owners);
    say("stopped");
    return 0;
}

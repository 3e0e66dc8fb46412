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
#define SOCKET_GROUP_ENV "MOKKA_IB_SOCKET_GROUP"
#define CTL_MAGIC 0x42494B4Du /* "MKIB" read as a little-endian u32 */
#define CTL_HELLO 1
#define CTL_REGISTER 2
#define CTL_UNREGISTER 3
#define CTL_HELLO_ACK 129
#define PROTOCOL_VERSION 1
#define HELLO_SIZE 20
#define REGISTER_SIZE 36
#define UNREGISTER_SIZE 12
#define MAX_TIMEOUT_MS 60000
#define PING_SERVER_TIMEOUT_MS 2000
#define MAX_CLIENTS 1024
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
    int listener;
    struct client *clients;
    size_t nclients;
    uint64_t next_serial;
    struct job *jobs;
    size_t njobs;
    bool serving;
} g = {.listener = -1};

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

/* ---- clients: the shim's connections ------------------------------------------------------------- */

static struct client *client_by_serial(uint64_t serial)
{
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->serial == serial && c->fd >= 0)
            return c;
    return NULL;
}

struct client *ping_server(uint32_t hca_index, const uint8_t oui[3], uint32_t *agent_id)
{
    for (struct client *c = g.clients; c != NULL; c = c->next) {
        if (c->fd < 0 || !c->greeted || c->hca_index != hca_index)
            continue;
        for (size_t i = 0; i < c->nagents; i++) {
            const struct agent *a = &c->agents[i];
            if (a->mgmt_class == CLASS_OPENIB_PING && memcmp(a->oui, oui, 3) == 0 &&
                (a->method_mask[0] >> METHOD_GET & 1)) {
                *agent_id = a->id;
                return c;
            }
        }
    }
    return NULL;
}

/* Never waits: a tool that stopped reading loses what its socket's queue cannot hold, and stalls no one. */
static bool send_umad(struct client *c, const struct umad *u)
{
    uint8_t packet[UMAD_SIZE];
    umad_encode(u, packet);
    return c != NULL && c->fd >= 0 && send(c->fd, packet, sizeof packet, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0;
}

static void gone(struct client *c, const char *problem)
{
    if (problem != NULL)
        say("client of %u gone: %s", c->hca_index, problem);
    close(c->fd);
    c->fd = -1;
}

static uint32_t get_le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static void hello(struct client *c, const uint8_t *packet, ssize_t len)
{
    uint32_t status = EPROTO;
    if (len == HELLO_SIZE && get_le32(packet) == CTL_MAGIC && get_le32(packet + 4) == CTL_HELLO &&
        get_le32(packet + 8) == PROTOCOL_VERSION) {
        node_refresh();
        c->hca_index = get_le32(packet + 16);
        status = c->hca_index < g.node.nports ? 0 : ENODEV;
    }
    uint8_t ack[12];
    put_le32(ack, CTL_MAGIC);
    put_le32(ack + 4, CTL_HELLO_ACK);
    put_le32(ack + 8, status);
    send(c->fd, ack, sizeof ack, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (status != 0)
        gone(c, NULL);
    else
        c->greeted = true;
}

static void control(struct client *c, const uint8_t *packet, ssize_t len)
{
    if (len < 8 || get_le32(packet) != CTL_MAGIC) {
        say("dropping a %zd-byte packet that is neither a MAD nor a control packet", len);
        return;
    }
    uint32_t kind = get_le32(packet + 4), id = len >= 12 ? get_le32(packet + 8) : 0;
    size_t i = 0;
    while (i < c->nagents && c->agents[i].id != id)
        i++;
    if (kind == CTL_REGISTER && len == REGISTER_SIZE) {
        if (i == c->nagents && c->nagents == MAX_AGENTS) {
            say("dropping a registration: client of %u has %d agents already", c->hca_index, MAX_AGENTS);
            return;
        }
        struct agent *a = &c->agents[i];
        a->id = id;
        a->mgmt_class = packet[13]; /* after the qpn byte */
        a->class_version = packet[14];
        memcpy(a->oui, packet + 16, 3);
        memcpy(a->method_mask, packet + 20, 16);
        if (i == c->nagents)
            c->nagents++;
    } else if (kind == CTL_UNREGISTER && len == UNREGISTER_SIZE && i < c->nagents) {
        c->agents[i] = c->agents[--c->nagents];
    }
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

static void mad_from(struct client *c, const uint8_t *packet, ssize_t len)
{
    struct umad u;
    if (!umad_decode(packet, (size_t)len, &u)) {
        say("dropping a %zd-byte packet: shorter than a MAD's headers", len);
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

static void receive(struct client *c)
{
    uint8_t packet[4096];
    ssize_t len = recv(c->fd, packet, sizeof packet, MSG_DONTWAIT);
    if (len < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (len <= 0) {
        gone(c, len < 0 ? strerror(errno) : NULL);
        return;
    }
    if (!c->greeted)
        hello(c, packet, len);
    else if (len < UMAD_HDR_SIZE)
        control(c, packet, len);
    else
        mad_from(c, packet, len);
}

static void accept_client(void)
{
    int fd = accept4(g.listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct client *c = g.nclients < MAX_CLIENTS ? calloc(1, sizeof *c) : NULL;
    if (c == NULL) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->serial = ++g.next_serial;
    c->next = g.clients;
    g.clients = c;
    g.nclients++;
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
    uint64_t earliest = fabric_deadline();
    for (struct job *job = g.jobs; job != NULL; job = job->next)
        if ((job->wait == FOR_PING_SERVER || job->wait == TIMING_OUT) && job->deadline < earliest)
            earliest = job->deadline;
    return earliest;
}

static void sweep(void)
{
    for (struct client **at = &g.clients; *at != NULL;) {
        struct client *c = *at;
        if (c->fd < 0) {
            *at = c->next;
            free(c);
            g.nclients--;
        } else {
            at = &c->next;
        }
    }
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
              "  $" SOCKET_GROUP_ENV "  a group (name or gid) whose members may use the socket (mode 0660)\n",
              out);
    exit(status);
}

/* The gid of $MOKKA_IB_SOCKET_GROUP (-1: unset); /etc/group is read directly (a static program has no NSS). */
static long socket_group(void)
{
    const char *group = getenv(SOCKET_GROUP_ENV);
    if (group == NULL || group[0] == '\0')
        return -1;
    if (strspn(group, "0123456789") == strlen(group) && strlen(group) < 10)
        return atol(group);
    FILE *f = fopen("/etc/group", "re");
    char line[4096];
    size_t len = strlen(group);
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        char *gid = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;
        if (gid != NULL && strncmp(line, group, len) == 0 && line[len] == ':') {
            fclose(f);
            return atol(gid + 1);
        }
    }
    if (f != NULL)
        fclose(f);
    fprintf(stderr, PROGRAM ": %s='%s': no such group\n", SOCKET_GROUP_ENV, group);
    exit(1);
}

/* Bind the shim's socket at path, already restricted (the umask makes its mode), and listen: the socket
 * appearing is the ready marker, so it is bound last.  (Not bound elsewhere and renamed: the shim knows the
 * responder's sockets by the address they were bound to.) */
static int bind_socket(const char *path, long gid)
{
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path) {
        fprintf(stderr, PROGRAM ": %s: a socket path has at most %zu bytes\n", path, sizeof address.sun_path - 1);
        return -1;
    }
    strcpy(address.sun_path, path);
    char dir[sizeof address.sun_path]; /* its directory, made as mkdir -p would */
    strcpy(dir, path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0777);
            *p = '/';
        }
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t was = umask(gid >= 0 ? 0117 : 0177); /* 0660 for the group, else 0600 */
    int bound = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&address, sizeof address);
    umask(was);
    if (bound < 0 || listen(fd, 64) < 0 || (gid >= 0 && chown(path, (uid_t)-1, (gid_t)gid) < 0)) {
        fprintf(stderr, PROGRAM ": cannot serve on %s: %s\n", path, strerror(errno));
        if (bound == 0)
            unlink(path);
        return -1;
    }
    return fd;
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
    long gid = socket_group();

    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    int signals = signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC);

    uint16_t tcp_port;
    if (!fabric_start(&listen_at, fabric_dir, peers, npeers, &tcp_port, error, sizeof error)) {
        fprintf(stderr, PROGRAM ": %s\n", error);
        return 1;
    }
    fabric_publish();
    if ((g.listener = bind_socket(g.socket_path, gid)) < 0) {
        fabric_stop();
        return 1;
    }
    say("serving %zu HCA(s) of %s on %s and %s:%u", g.node.nports, g.node.name, g.socket_path, listen_at.host,
        tcp_port);

    struct pollfd *fds = NULL;
    void **owners = NULL;
    size_t cap = 0;
    for (bool stopping = false; !stopping;) {
        size_t want = 2 + g.nclients + 1 + 256 + 1;
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
        fds[n] = (struct pollfd){.fd = g.listener, .events = POLLIN}, owners[n++] = &g.listener;
        for (struct client *c = g.clients; c != NULL; c = c->next)
            if (c->fd >= 0)
                fds[n] = (struct pollfd){.fd = c->fd, .events = POLLIN}, owners[n++] = c;
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
            } else if (owners[i] == &g.listener) {
                accept_client();
            } else if (i < first_fabric) {
                struct client *c = owners[i];
                if (c->fd >= 0)
                    receive(c);
            } else {
                fabric_event(owners[i]);
            }
            if (fabric_take_found())
                peers_found();
        }
        now = now_ms();
        expire(now);
        fabric_expire(now);
        if (fabric_take_found())
            peers_found();
        sweep();
    }
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->fd >= 0)
            close(c->fd);
    close(g.listener);
    unlink(g.socket_path);
    fabric_stop();
    say("stopped");
    return 0;
}

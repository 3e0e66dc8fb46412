/* The fabric's TCP port: other nodes' responders ask this one, and this one asks them.
 *
 * One request per connection: a 4-byte big-endian length (at most 1 MiB), then a UTF-8 JSON object; the
 * answer is framed the same way (packages/sim-ib/README.md, "Between nodes (TCP)").
 *   {"op": "describe"} -> this node's description (peers.c)
 *   {"op": "ping", "dlid": int, "slid": int, "umad": hex} -> {"umad": hex} or {"umad": null}
 * Every connection has IO_TIMEOUT_MS to send its request or answer; none blocks the loop.  What arrives
 * is untrusted: every length is checked, and a malformed message closes its connection with a line in
 * the log.
 *
 * Who asks is known: a loopback connection by the user owning its other end (/proc/net/tcp{,6}), any
 * other by its address.  Root and the responder's own user (this machine's responders) are served up to
 * MAX_CONNS; anyone else at most MAX_SERVED_PER_PEER requests at once, and all of them together never
 * the last RESERVED_CONNS, so no local user can take the port from the nodes. */
#include "responder.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_MESSAGE (1u << 20)
#define IO_TIMEOUT_MS 5000
#define MAX_CONNS 256
#define MAX_SERVED_PER_PEER 16
#define RESERVED_CONNS 64
#define PEER_MAX 64

enum role { SERVE, DESCRIBE, RELAY_PING };
enum state { CONNECTING, SENDING, RECEIVING, WAITING, CLOSED };
struct conn {
    struct conn *next;
    int fd;
    enum role role;
    enum state state;
    struct buf in, out;
    size_t sent;
    uint64_t deadline;
    size_t slot;        /* DESCRIBE: which static peer */
    struct job *job;    /* RELAY_PING */
    char name[NODE_NAME_MAX + 1]; /* RELAY_PING: the peer's */
    struct address to;  /* DESCRIBE, RELAY_PING */
    bool privileged;    /* SERVE: asked by root or this responder's user */
    char peer[PEER_MAX]; /* SERVE: who asks ("uid N" on loopback, else the address) */
};

static struct {
    int listener;
    struct address listen;
    uint16_t port;
    struct conn *conns;
    size_t nconns;
    uint64_t refused; /* requests turned away (logged at the 1st, 2nd, 4th ...) */
} fab = {.listener = -1};

static void finish(struct conn *c, const char *text, size_t len, const char *problem);

/* ---- addresses ------------------------------------------------------------------------------------ */

bool parse_address(const char *text, struct address *out)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || colon[1] == '\0')
        return false;
    unsigned long port = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9' || port > 65535)
            return false;
        port = port * 10 + (unsigned long)(*p - '0');
    }
    if (port > 65535)
        return false;
    const char *host = text;
    size_t len = (size_t)(colon - text);
    while (len > 0 && (*host == '[')) /* "[v6]" as Python's strip("[]") */
        host++, len--;
    while (len > 0 && host[len - 1] == ']')
        len--;
    if (len >= sizeof out->host)
        return false;
    memcpy(out->host, host, len);
    out->host[len] = '\0';
    out->port = (uint16_t)port;
    return true;
}

static int resolve(const struct address *a, bool passive, struct addrinfo **found)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    char port[8];
    snprintf(port, sizeof port, "%u", a->port);
    return getaddrinfo(a->host[0] ? a->host : NULL, port, &hints, found);
}

/* ---- connections ---------------------------------------------------------------------------------- */

static void frame(struct buf *out, const struct buf *message)
{
    uint8_t length[4];
    put_be(length, 4, message->len);
    buf_add(out, length, 4);
    buf_add(out, message->p, message->len);
}

static void close_conn(struct conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = CLOSED;
}

static struct conn *new_conn(int fd, enum role role)
{
    struct conn *c = fab.nconns < MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    if (c == NULL)
        return NULL;
    c->fd = fd;
    c->role = role;
    c->deadline = now_ms() + IO_TIMEOUT_MS;
    c->next = fab.conns;
    fab.conns = c;
    fab.nconns++;
    return c;
}

/* An outbound request to `to`, not yet connected; NULL if there are too many. */
static struct conn *outbound(enum role role, const struct address *to, const struct buf *message)
{
    struct conn *c = new_conn(-1, role);
    if (c != NULL) {
        c->to = *to;
        frame(&c->out, message);
    }
    return c;
}

/* Start connecting c (finish runs at once if it cannot). */
static void start(struct conn *c)
{
    struct addrinfo *found = NULL;
    int problem = resolve(&c->to, false, &found);
    if (problem != 0) {
        finish(c, NULL, 0, gai_strerror(problem));
        return;
    }
    int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || (connect(fd, found->ai_addr, found->ai_addrlen) < 0 && errno != EINPROGRESS)) {
        int error = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(found);
        finish(c, NULL, 0, strerror(error));
        return;
    }
    freeaddrinfo(found);
    c->fd = fd;
    c->state = CONNECTING;
}

static void send_message(struct conn *c, const struct buf *message)
{
    frame(&c->out, message);
    c->state = SENDING;
    c->deadline = now_ms() + IO_TIMEOUT_MS;
}

/* The ib_user_mad a hex string at tok[at] holds; false if it holds none. */
static bool hex_umad(const char *text, const struct jtok *tok, int at, struct umad *out)
{
    char hex[2 * UMAD_SIZE + 1];
    uint8_t raw[UMAD_SIZE];
    if (!json_string(text, tok, at, hex, sizeof hex) || strlen(hex) % 2 != 0)
        return false;
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        int high = -1, low = -1;
        for (int d = 0; d < 16; d++) {
            if ("0123456789abcdef"[d] == hex[2 * i] || "0123456789ABCDEF"[d] == hex[2 * i])
                high = d;
            if ("0123456789abcdef"[d] == hex[2 * i + 1] || "0123456789ABCDEF"[d] == hex[2 * i + 1])
                low = d;
        }
        if (high < 0 || low < 0)
            return false;
        raw[i] = (uint8_t)(high << 4 | low);
    }
    return umad_decode(raw, n, out);
}

static void serve_request(struct conn *c, const char *text, size_t len)
{
    static struct jtok tok[64];
    char op[32];
    if (json_parse(text, len, tok, 64) < 0 || tok[0].type != J_OBJECT) {
        finish(c, NULL, 0, "not a JSON object (or too large)");
        return;
    }
    struct buf answer = {0};
    if (!json_string(text, tok, json_get(text, tok, 0, "op"), op, sizeof op)) {
        buf_add(&answer, "{\"error\": \"unknown op None\"}", 28);
    } else if (strcmp(op, "describe") == 0) {
        node_refresh();
        describe_node(&answer);
    } else if (strcmp(op, "ping") == 0) {
        uint64_t dlid, slid = 0;
        int slid_at = json_get(text, tok, 0, "slid");
        struct umad request;
        bool ok = json_u64(text, tok, json_get(text, tok, 0, "dlid"), UINT16_MAX, &dlid) &&
                  (slid_at < 0 || json_u64(text, tok, slid_at, UINT16_MAX, &slid)) &&
                  hex_umad(text, tok, json_get(text, tok, 0, "umad"), &request);
        if (!ok) {
            finish(c, NULL, 0, "a ping without dlid, or a umad that is no ib_user_mad");
            return;
        }
        request.lid = (uint16_t)dlid;
        c->state = WAITING;
        c->deadline = UINT64_MAX; /* the answer comes within the ping server's timeout */
        fabric_ping_arrived(c, &request, (uint16_t)slid);
        return;
    } else {
        char problem[64];
        snprintf(problem, sizeof problem, "unknown op '%s'", op);
        buf_add(&answer, "{\"error\": ", 10);
        json_add_string(&answer, problem);
        buf_add(&answer, "}", 1);
    }
    send_message(c, &answer);
    buf_free(&answer);
}

static void add_hex(struct buf *b, const struct umad *u)
{
    uint8_t raw[UMAD_SIZE];
    char hex[2 * UMAD_SIZE + 1];
    umad_encode(u, raw);
    for (size_t i = 0; i < UMAD_SIZE; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    buf_add(b, "\"", 1);
    buf_add(b, hex, 2 * UMAD_SIZE);
    buf_add(b, "\"", 1);
}

void fabric_answer_ping(struct conn *c, const struct umad *answer)
{
    struct buf message = {0};
    buf_add(&message, "{\"umad\": ", 9);
    if (answer != NULL)
        add_hex(&message, answer);
    else
        buf_add(&message, "null", 4);
    buf_add(&message, "}", 1);
    send_message(c, &message);
    buf_free(&message);
}

void fabric_describe(size_t slot, const struct address *to)
{
    struct buf request = {0};
    buf_add(&request, "{\"op\": \"describe\"}", 18);
    struct conn *c = outbound(DESCRIBE, to, &request);
    buf_free(&request);
    if (c == NULL) {
        peer_described(slot, NULL, 0, "too many connections");
        return;
    }
    c->slot = slot;
    start(c);
}

void fabric_relay(struct job *job, const struct peer *peer, const struct umad *request, uint16_t slid)
{
    struct buf message = {0};
    buf_printf(&message, "{\"op\": \"ping\", \"dlid\": %u, \"slid\": %u, \"umad\": ", request->lid, slid);
    add_hex(&message, request);
    buf_add(&message, "}", 1);
    struct conn stand_in = {.fd = -1, .role = RELAY_PING};
    snprintf(stand_in.to.host, sizeof stand_in.to.host, "%s", peer->address);
    stand_in.to.port = peer->port;
    struct conn *c = outbound(RELAY_PING, &stand_in.to, &message);
    buf_free(&message);
    c = c != NULL ? c : &stand_in;
    c->job = job;
    snprintf(c->name, sizeof c->name, "%s", peer->name);
    if (c == &stand_in)
        finish(c, NULL, 0, "too many connections");
    else
        start(c);
}

/* The end of a connection: the whole message it read (text), or the problem it met. */
static void finish(struct conn *c, const char *text, size_t len, const char *problem)
{
    switch (c->role) {
    case SERVE:
        if (problem != NULL)
            say("fabric request failed: %s", problem);
        break;
    case DESCRIBE:
        peer_described(c->slot, text, len, problem);
        break;
    case RELAY_PING: {
        static struct jtok tok[16];
        struct umad answer;
        bool ok = false;
        int at;
        if (problem == NULL && json_parse(text, len, tok, 16) >= 0 && (at = json_get(text, tok, 0, "umad")) >= 0) {
            ok = hex_umad(text, tok, at, &answer);
            if (!ok && !json_is_null(text, tok, at))
                problem = "an answer whose umad is no ib_user_mad";
        } else if (problem == NULL) {
            problem = "an answer without umad";
        }
        if (problem != NULL)
            say("ping relay to %s failed: %s", c->name, problem);
        job_relayed(c->job, ok ? &answer : NULL);
        break;
    }
    }
    close_conn(c);
}

/* ---- the loop's side ------------------------------------------------------------------------------ */

bool fabric_start(const struct address *listen_at, uint16_t *bound, char *error, size_t error_len)
{
    fab.listen = *listen_at;
    struct addrinfo *found = NULL;
    int problem = resolve(listen_at, true, &found);
    if (problem != 0) {
        snprintf(error, error_len, "cannot listen on %s:%u: %s", listen_at->host, listen_at->port,
                 gai_strerror(problem));
        return false;
    }
    int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int on = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        if (found->ai_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    }
    if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) < 0 || listen(fd, 100) < 0) {
        snprintf(error, error_len, "cannot listen on %s:%u: %s", listen_at->host, listen_at->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(found);
        return false;
    }
    freeaddrinfo(found);
    struct sockaddr_storage address;
    socklen_t len = sizeof address;
    getsockname(fd, (struct sockaddr *)&address, &len);
    fab.port = ntohs(address.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&address)->sin6_port
                                                   : ((struct sockaddr_in *)&address)->sin_port);
    fab.listener = fd;
    *bound = fab.port;
    return true;
}

void fabric_stop(void)
{
    for (struct conn *c = fab.conns; c != NULL; c = c->next)
        if (c->fd >= 0)
            close(c->fd);
    if (fab.listener >= 0)
        close(fab.listener);
    fab.listener = -1;
}

size_t fabric_pollfds(struct pollfd *fds, void **owners, size_t cap)
{
    size_t n = 0;
    if (fab.listener >= 0 && n < cap) {
        fds[n] = (struct pollfd){.fd = fab.listener, .events = POLLIN};
        owners[n++] = &fab;
    }
    for (struct conn *c = fab.conns; c != NULL && n < cap; c = c->next) {
        if (c->fd < 0 || c->state == WAITING || c->state == CLOSED)
            continue;
        short events = c->state == RECEIVING ? POLLIN : POLLOUT;
        fds[n] = (struct pollfd){.fd = c->fd, .events = events};
        owners[n++] = c;
    }
    return n;
}

/* The uid owning the other end of loopback connection fd (/proc/net/tcp{,6}); false if not found. */
static bool loopback_owner(const struct sockaddr_storage *peer, const struct sockaddr_storage *own, uid_t *uid)
{
    char want_local[48], want_remote[48];
    const char *table;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *p = (const void *)peer, *o = (const void *)own;
        snprintf(want_local, sizeof want_local, "%08X:%04X", (unsigned)p->sin_addr.s_addr, ntohs(p->sin_port));
        snprintf(want_remote, sizeof want_remote, "%08X:%04X", (unsigned)o->sin_addr.s_addr, ntohs(o->sin_port));
        table = "/proc/net/tcp";
    } else {
        const struct sockaddr_in6 *p = (const void *)peer, *o = (const void *)own;
        uint32_t a[4], b[4];
        memcpy(a, &p->sin6_addr, 16);
        memcpy(b, &o->sin6_addr, 16);
        snprintf(want_local, sizeof want_local, "%08X%08X%08X%08X:%04X", a[0], a[1], a[2], a[3], ntohs(p->sin6_port));
        snprintf(want_remote, sizeof want_remote, "%08X%08X%08X%08X:%04X", b[0], b[1], b[2], b[3],
                 ntohs(o->sin6_port));
        table = "/proc/net/tcp6";
    }
    FILE *f = fopen(table, "re");
    char line[512], local[48], remote[48];
    unsigned owner;
    bool found = false;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, " %*u: %47s %47s %*x %*s %*s %*s %u", local, remote, &owner) == 3 &&
            strcmp(local, want_local) == 0 && strcmp(remote, want_remote) == 0) {
            *uid = owner;
            found = true;
        }
    if (f != NULL)
        fclose(f);
    return found;
}

static bool is_loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr;
    return a->ss_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(v6);
}

/* Who is at the other end of fd: *privileged for root and this user on loopback. */
static void identify(int fd, char *peer, size_t cap, bool *privileged)
{
    struct sockaddr_storage them = {0}, us = {0};
    socklen_t n = sizeof them, m = sizeof us;
    uid_t uid;
    *privileged = false;
    if (getpeername(fd, (struct sockaddr *)&them, &n) < 0 || getsockname(fd, (struct sockaddr *)&us, &m) < 0 ||
        (them.ss_family != AF_INET && them.ss_family != AF_INET6)) {
        snprintf(peer, cap, "unknown");
    } else if (is_loopback(&them)) {
        if (loopback_owner(&them, &us, &uid)) {
            snprintf(peer, cap, "uid %u", (unsigned)uid);
            *privileged = uid == 0 || uid == geteuid();
        } else {
            snprintf(peer, cap, "loopback, owner unknown");
        }
    } else {
        char text[INET6_ADDRSTRLEN] = "?";
        const void *addr = them.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&them)->sin_addr
                                                     : (const void *)&((struct sockaddr_in6 *)&them)->sin6_addr;
        inet_ntop(them.ss_family, addr, text, sizeof text);
        snprintf(peer, cap, "%s", text);
    }
}

static bool admitted(const char *peer, bool privileged, const char **why)
{
    size_t same = 0, others = 0;
    for (struct conn *c = fab.conns; c != NULL; c = c->next)
        if (c->role == SERVE && c->state != CLOSED && !c->privileged)
            others++, same += strcmp(c->peer, peer) == 0;
    return admission((struct admission){fab.nconns, MAX_CONNS, RESERVED_CONNS, MAX_SERVED_PER_PEER},
                     privileged, same, others, why);
}

static void accept_conn(void)
{
    int fd = accept4(fab.listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    char peer[PEER_MAX];
    bool privileged;
    const char *why = "out of memory";
    identify(fd, peer, sizeof peer, &privileged);
    struct conn *c = admitted(peer, privileged, &why) ? new_conn(fd, SERVE) : NULL;
    if (c == NULL) {
        if ((fab.refused & (fab.refused + 1)) == 0)
            say("refusing a fabric request of %s: %s (%llu refused)", peer, why, (unsigned long long)fab.refused + 1);
        fab.refused++;
        close(fd);
        return;
    }
    c->privileged = privileged;
    memcpy(c->peer, peer, sizeof c->peer);
    c->state = RECEIVING;
}

static void receive(struct conn *c)
{
    char chunk[65536];
    ssize_t n = recv(c->fd, chunk, sizeof chunk, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        char problem[96];
        if (n < 0)
            snprintf(problem, sizeof problem, "%s", strerror(errno));
        else
            snprintf(problem, sizeof problem, "closed after %zu bytes of a message", c->in.len);
        finish(c, NULL, 0, problem);
        return;
    }
    buf_add(&c->in, chunk, (size_t)n);
    if (c->in.failed) {
        finish(c, NULL, 0, "out of memory");
        return;
    }
    if (c->in.len < 4)
        return;
    uint64_t size = get_be((const uint8_t *)c->in.p, 4);
    if (size > MAX_MESSAGE) {
        finish(c, NULL, 0, "a message over 1 MiB");
        return;
    }
    if (c->in.len < 4 + size)
        return;
    if (c->in.len > 4 + size) {
        finish(c, NULL, 0, "bytes after the message");
        return;
    }
    if (c->role == SERVE)
        serve_request(c, c->in.p + 4, size);
    else
        finish(c, c->in.p + 4, size, NULL);
}

static void send_some(struct conn *c)
{
    if (c->state == CONNECTING) {
        int error = 0;
        socklen_t len = sizeof error;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error != 0) {
            finish(c, NULL, 0, strerror(error));
            return;
        }
        c->state = SENDING;
    }
    if (c->out.failed) {
        finish(c, NULL, 0, "out of memory");
        return;
    }
    ssize_t n = send(c->fd, c->out.p + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n < 0) {
        finish(c, NULL, 0, strerror(errno));
        return;
    }
    c->sent += (size_t)n;
    if (c->sent < c->out.len)
        return;
    if (c->role == SERVE)
        close_conn(c); /* answered: one request per connection */
    else
        c->state = RECEIVING;
}

void fabric_event(void *owner)
{
    if (owner == &fab) {
        accept_conn();
        return;
    }
    struct conn *c = owner;
    if (c->state == CLOSED || c->state == WAITING)
        return;
    if (c->state == RECEIVING)
        receive(c);
    else
        send_some(c);
}

uint64_t fabric_deadline(void)
{
    uint64_t earliest = UINT64_MAX;
    for (struct conn *c = fab.conns; c != NULL; c = c->next)
        if (c->state != CLOSED && c->deadline < earliest)
            earliest = c->deadline;
    return earliest;
}

void fabric_expire(uint64_t now)
{
    for (struct conn *c = fab.conns; c != NULL; c = c->next)
        if (c->state != CLOSED && c->state != WAITING && c->deadline <= now)
            finish(c, NULL, 0, c->role == SERVE && c->state == RECEIVING ? "no whole request in time" : "timed out");
}

void fabric_sweep(void)
{
    for (struct conn **at = &fab.conns; *at != NULL;) {
        struct conn *c = *at;
        if (c->state == CLOSED) {
            *at = c->next;
            buf_free(&c->in);
            buf_free(&c->out);
            free(c);
            fab.nconns--;
        } else {
            at = &c->next;
        }
    }
}

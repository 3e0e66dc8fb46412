/* Responders of different nodes find each other and carry pings between them.
 *
 * Discovery: every responder writes <fabric dir>/<node name>.json (its TCP address and ports) and reads
 * the others'; responders given --peer HOST:PORT ask those for the same description over TCP instead.
 *
 * TCP protocol (one request per connection): a 4-byte big-endian length, then a UTF-8 JSON object; the
 * answer is framed the same way.
 *   {"op": "describe"} -> {"node_name": str, "address": str, "port": int, "ports": [port objects]}
 *   {"op": "ping", "dlid": int, "slid": int, "umad": hex} (the requester's ib_user_mad) -> {"umad": hex}
 *     (the GetResp to deliver: from an `ibping -S` on that port if one is registered, else the responder's
 *     own) or {"umad": null} (no such port, it is down, or its server is silent)
 * A port object has the keys of struct port (cap_mask ... width_active), node_name included.
 * Everything read here comes from the network or another process: every length is checked, and a
 * malformed message or entry is dropped with a line in the log. */
#include "responder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MESSAGE (1u << 20)
#define MAX_TOKENS 16384
#define IO_TIMEOUT_MS 5000
#define PEER_CACHE_MS 2000
#define MAX_CONNS 256
#define MAX_PEERS 1024

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
};

struct lookup {
    bool valid;
    uint64_t stamp;
    struct peer *list;
    size_t count;
};

static struct {
    int listener;
    struct address listen;
    uint16_t port;
    char dir[4096];
    char own[NODE_NAME_MAX + 1]; /* the name the entry is published under */
    char *published;             /* what we wrote there */
    const struct address *peers;
    size_t npeers;
    struct conn *conns;
    size_t nconns;
    struct lookup cache;
    bool looking, found, fetched; /* fetched: the cache was handed out this turn (it stays as it is) */
    struct peer *asked; /* one slot per static peer while they are asked (name "" if none answered) */
    size_t outstanding;
} fab = {.listener = -1};

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

/* ---- descriptions --------------------------------------------------------------------------------- */

static void describe(struct buf *b, const char *name, const char *address, uint16_t port, const struct port *ports,
                     size_t n)
{
    buf_add(b, "{\"node_name\": ", 14);
    json_add_string(b, name);
    buf_add(b, ", \"address\": ", 13);
    json_add_string(b, address);
    buf_printf(b, ", \"port\": %u, \"ports\": [", port);
    for (size_t i = 0; i < n; i++) {
        const struct port *p = &ports[i];
        buf_printf(b, "%s{\"cap_mask\": %u, \"device_id\": %u, \"hca\": ", i ? ", " : "", p->cap_mask, p->device_id);
        json_add_string(b, p->hca);
        buf_printf(b, ", \"index\": %u, \"lid\": %u, \"node_desc\": ", p->index, p->lid);
        json_add_string(b, p->node_desc);
        buf_printf(b, ", \"node_guid\": %llu, \"node_name\": ", (unsigned long long)p->node_guid);
        json_add_string(b, p->node_name);
        buf_printf(b,
                   ", \"phys_state\": %u, \"port_guid\": %llu, \"revision\": %u, \"sm_lid\": %u, \"speed_active\": %u, "
                   "\"speed_ext_active\": %u, \"state\": %u, \"vendor_id\": %u, \"width_active\": %u}",
                   p->phys_state, (unsigned long long)p->port_guid, p->revision, p->sm_lid, p->speed_active,
                   p->speed_ext_active, p->state, p->vendor_id, p->width_active);
    }
    buf_add(b, "]}", 2);
}

static void own_description(struct buf *b)
{
    const struct node *node = current_node();
    describe(b, node->name, fab.listen.host, fab.port, node->ports, node->nports);
}

#define NUMBER_FIELD(key, max) {#key, offsetof(struct port, key), sizeof(((struct port *)0)->key), max}
static const struct {
    const char *key;
    size_t offset, size;
    uint64_t max;
} number_fields[] = {
    NUMBER_FIELD(cap_mask, UINT32_MAX),   NUMBER_FIELD(device_id, UINT16_MAX), NUMBER_FIELD(index, UINT32_MAX),
    NUMBER_FIELD(lid, UINT16_MAX),        NUMBER_FIELD(node_guid, UINT64_MAX), NUMBER_FIELD(phys_state, UINT8_MAX),
    NUMBER_FIELD(port_guid, UINT64_MAX),  NUMBER_FIELD(revision, UINT32_MAX),  NUMBER_FIELD(sm_lid, UINT16_MAX),
    NUMBER_FIELD(speed_active, UINT8_MAX), NUMBER_FIELD(speed_ext_active, UINT8_MAX),
    NUMBER_FIELD(state, UINT8_MAX),       NUMBER_FIELD(vendor_id, UINT32_MAX), NUMBER_FIELD(width_active, UINT8_MAX),
};

static void free_peer(struct peer *p)
{
    free(p->ports);
    p->ports = NULL;
    p->nports = 0;
}

/* A description (text[0:len]) as a peer; NULL, or what is wrong with it. */
static const char *read_description(const char *text, size_t len, struct peer *out)
{
    static struct jtok tok[MAX_TOKENS];
    memset(out, 0, sizeof *out);
    if (json_parse(text, len, tok, MAX_TOKENS) < 0)
        return "not a JSON value (or too large)";
    uint64_t port;
    int ports = json_get(text, tok, 0, "ports");
    if (!json_string(text, tok, json_get(text, tok, 0, "node_name"), out->name, sizeof out->name) ||
        !json_string(text, tok, json_get(text, tok, 0, "address"), out->address, sizeof out->address) ||
        !json_u64(text, tok, json_get(text, tok, 0, "port"), UINT16_MAX, &port) || ports < 0 ||
        tok[ports].type != J_ARRAY)
        return "no node_name, address, port and ports";
    if (tok[ports].size > MAX_PORTS)
        return "too many ports";
    out->port = (uint16_t)port;
    out->ports = calloc(tok[ports].size ? tok[ports].size : 1, sizeof *out->ports);
    if (out->ports == NULL)
        return "out of memory";
    for (int at = ports + 1; out->nports < tok[ports].size; at = (int)tok[at].after) {
        struct port *p = &out->ports[out->nports++];
        if (!json_string(text, tok, json_get(text, tok, at, "hca"), p->hca, sizeof p->hca) ||
            !json_string(text, tok, json_get(text, tok, at, "node_desc"), p->node_desc, sizeof p->node_desc) ||
            !json_string(text, tok, json_get(text, tok, at, "node_name"), p->node_name, sizeof p->node_name)) {
            free_peer(out);
            return "a port without hca, node_desc or node_name";
        }
        for (size_t f = 0; f < sizeof number_fields / sizeof number_fields[0]; f++) {
            uint64_t v;
            if (!json_u64(text, tok, json_get(text, tok, at, number_fields[f].key), number_fields[f].max, &v)) {
                free_peer(out);
                return "a port field missing or out of range";
            }
            uint8_t *to = (uint8_t *)p + number_fields[f].offset;
            uint8_t u8 = (uint8_t)v;
            uint16_t u16 = (uint16_t)v;
            uint32_t u32 = (uint32_t)v;
            memcpy(to, number_fields[f].size == 1 ? (void *)&u8 : number_fields[f].size == 2 ? (void *)&u16
                       : number_fields[f].size == 4 ? (void *)&u32 : (void *)&v, number_fields[f].size);
        }
    }
    return NULL;
}

/* ---- the fabric directory ------------------------------------------------------------------------- */

static int make_dirs(const char *path)
{
    char partial[sizeof fab.dir];
    size_t len = strlen(path);
    if (len >= sizeof partial)
        return errno = ENAMETOOLONG, -1;
    memcpy(partial, path, len + 1);
    for (char *p = partial + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char was = *p;
            *p = '\0';
            if (mkdir(partial, 0777) < 0 && errno != EEXIST)
                return -1;
            if (was == '\0')
                return 0;
            *p = was;
        }
    }
}

static char *read_small(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct buf b = {0};
    char chunk[8192];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0 && b.len <= MAX_MESSAGE)
        buf_add(&b, chunk, (size_t)n);
    close(fd);
    if (n < 0 || b.failed || b.len > MAX_MESSAGE || b.p == NULL) {
        buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

void fabric_publish(void)
{
    struct buf text = {0};
    own_description(&text);
    char path[sizeof fab.dir + NODE_NAME_MAX + 8], tmp[sizeof path + 32];
    snprintf(path, sizeof path, "%s/%s.json", fab.dir, fab.own);
    snprintf(tmp, sizeof tmp, "%s/.%s.json.%ld.tmp", fab.dir, fab.own, (long)getpid());
    int fd = -1;
    if (text.failed || make_dirs(fab.dir) < 0 ||
        (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
        say("cannot publish %s: %s", path, text.failed ? "out of memory" : strerror(errno));
        buf_free(&text);
        return;
    }
    bool ok = fchmod(fd, 0600) == 0 && write(fd, text.p, text.len) == (ssize_t)text.len;
    ok = close(fd) == 0 && ok && rename(tmp, path) == 0;
    if (!ok) {
        say("cannot publish %s: %s", path, strerror(errno));
        unlink(tmp);
        buf_free(&text);
        return;
    }
    free(fab.published);
    fab.published = text.p;
}

static void withdraw(void)
{
    if (fab.published == NULL)
        return;
    char path[sizeof fab.dir + NODE_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s/%s.json", fab.dir, fab.own);
    size_t len;
    char *there = read_small(path, &len);
    if (there != NULL && len == strlen(fab.published) && memcmp(there, fab.published, len) == 0)
        unlink(path);
    free(there);
}

static void add_peer(struct peer *list, size_t *count, struct peer *p)
{
    if (strcmp(p->name, current_node()->name) == 0 || *count >= MAX_PEERS) {
        free_peer(p);
        return;
    }
    for (size_t i = 0; i < *count; i++)
        if (strcmp(list[i].name, p->name) == 0) { /* the later one counts, where the first was */
            free_peer(&list[i]);
            list[i] = *p;
            return;
        }
    list[(*count)++] = *p;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void read_directory(struct peer *list, size_t *count)
{
    DIR *dir = opendir(fab.dir);
    if (dir == NULL)
        return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL && n < MAX_PEERS;) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len <= 5 || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
            if (more == NULL)
                break;
            names = more;
        }
        if ((names[n] = strdup(e->d_name)) != NULL)
            n++;
    }
    closedir(dir);
    if (n)
        qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        char path[sizeof fab.dir + 512];
        snprintf(path, sizeof path, "%s/%s", fab.dir, names[i]);
        free(names[i]);
        size_t len;
        char *text = read_small(path, &len);
        struct peer p;
        const char *problem = text == NULL ? strerror(errno ? errno : EIO) : read_description(text, len, &p);
        free(text);
        if (problem != NULL) {
            say("ignoring fabric entry %s: %s", path, problem);
            continue;
        }
        if (!p.address[0] || strcmp(p.address, "0.0.0.0") == 0 || strcmp(p.address, "::") == 0)
            strcpy(p.address, "127.0.0.1"); /* listening everywhere: reachable on this machine's loopback */
        add_peer(list, count, &p);
    }
    free(names);
}

static void set_cache(struct peer *list, size_t count)
{
    for (size_t i = 0; i < fab.cache.count; i++)
        free_peer(&fab.cache.list[i]);
    free(fab.cache.list);
    fab.cache = (struct lookup){.valid = true, .stamp = now_ms(), .list = list, .count = count};
}

static struct conn *outbound(enum role role, const struct address *to, const struct buf *message);
static void start(struct conn *c);
static void finish(struct conn *c, const char *text, size_t len, const char *problem);

static void lookup_done(void)
{
    struct peer *list = calloc(MAX_PEERS, sizeof *list);
    size_t count = 0;
    if (list != NULL) {
        read_directory(list, &count);
        for (size_t i = 0; i < fab.npeers; i++)
            if (fab.asked != NULL && fab.asked[i].name[0])
                add_peer(list, &count, &fab.asked[i]);
            else if (fab.asked != NULL)
                free_peer(&fab.asked[i]);
    }
    free(fab.asked);
    fab.asked = NULL;
    fab.looking = false;
    set_cache(list, list ? count : 0);
}

bool fabric_peers(bool stale_ok, const struct peer **peers, size_t *count)
{
    if (fab.looking)
        return false;
    if (!fab.cache.valid || (!stale_ok && !fab.fetched && now_ms() - fab.cache.stamp >= PEER_CACHE_MS)) {
        if (fab.npeers > 0 && (fab.asked = calloc(fab.npeers, sizeof *fab.asked)) != NULL) {
            fab.looking = true;
            fab.outstanding = fab.npeers;
            struct buf request = {0};
            buf_add(&request, "{\"op\": \"describe\"}", 18);
            for (size_t i = 0; i < fab.npeers; i++) {
                struct conn *c = outbound(DESCRIBE, &fab.peers[i], &request);
                struct conn stand_in = {.fd = -1, .role = DESCRIBE, .to = fab.peers[i], .slot = i};
                if (c == NULL) {
                    finish(&stand_in, NULL, 0, "too many connections");
                } else {
                    c->slot = i;
                    start(c);
                }
            }
            buf_free(&request);
            if (fab.looking)
                return false;
            /* every one failed at once: lookup_done has run */
        } else {
            lookup_done();
        }
    }
    fab.fetched = true;
    *peers = fab.cache.list;
    *count = fab.cache.count;
    return true;
}

void fabric_new_turn(void) { fab.fetched = false; }

bool fabric_take_found(void)
{
    bool found = fab.found;
    fab.found = false;
    return found;
}

static int by_text(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

const char *partner(const char *own, const struct peer *peers, size_t count)
{
    const char *names[MAX_PEERS + 2];
    size_t n = 0;
    names[n++] = own;
    names[n++] = current_node()->name;
    for (size_t i = 0; i < count && n < MAX_PEERS + 2; i++)
        names[n++] = peers[i].name;
    qsort(names, n, sizeof *names, by_text);
    size_t distinct = 0, position = 0;
    for (size_t i = 0; i < n; i++)
        if (distinct == 0 || strcmp(names[i], names[distinct - 1]) != 0) {
            if (strcmp(names[i], own) == 0)
                position = distinct;
            names[distinct++] = names[i];
        }
    size_t mate = position % 2 == 0 ? position + 1 : position - 1;
    return mate < distinct ? names[mate] : NULL;
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
        own_description(&answer);
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
    case DESCRIBE: {
        struct peer p;
        if (problem == NULL)
            problem = read_description(text, len, &p);
        if (problem != NULL) {
            say("peer %s:%u unreachable: %s", c->to.host, c->to.port, problem);
        } else if (fab.asked != NULL) {
            /* reach it where we were told to, whatever address it listens on */
            snprintf(p.address, sizeof p.address, "%s", c->to.host);
            p.port = c->to.port;
            fab.asked[c->slot] = p;
        } else {
            free_peer(&p);
        }
        if (fab.looking && --fab.outstanding == 0) {
            lookup_done();
            fab.found = true;
        }
        break;
    }
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

bool fabric_start(const struct address *listen_at, const char *fabric_dir, const struct address *peers,
                  size_t npeers, uint16_t *bound, char *error, size_t error_len)
{
    fab.listen = *listen_at;
    fab.peers = peers;
    fab.npeers = npeers;
    snprintf(fab.own, sizeof fab.own, "%s", current_node()->name);
    if (strlen(fabric_dir) >= sizeof fab.dir) {
        snprintf(error, error_len, "--fabric-dir %.64s...: too long", fabric_dir);
        return false;
    }
    strcpy(fab.dir, fabric_dir);
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
    withdraw();
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

static void accept_conn(void)
{
    int fd = accept4(fab.listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct conn *c = new_conn(fd, SERVE);
    if (c == NULL) {
        close(fd);
        return;
    }
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

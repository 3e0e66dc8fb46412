/* The other nodes: the fabric directory, where responders of one machine publish their description
 * (<fabric dir>/<node name>.json, mode 0600) and read the others', and static peers asked over TCP
 * (fabric.c); both looked up again at most every PEER_CACHE_MS.  A description is the fabric's "describe"
 * answer (packages/sim-ib/README.md, "Between nodes (TCP)").  Entries and answers are untrusted: one that
 * cannot be read is ignored with a line in the log. */
#include "responder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ENTRY (1u << 20)
#define MAX_TOKENS 16384
#define PEER_CACHE_MS 2000
#define MAX_PEERS 1024

struct lookup {
    bool valid;
    uint64_t stamp;
    struct peer *list;
    size_t count;
};

static struct {
    char dir[4096];
    char own[NODE_NAME_MAX + 1]; /* the name the entry is published under */
    char *published;             /* what we wrote there */
    const char *address;         /* ours, as --listen gave it */
    uint16_t port;
    const struct address *peers;
    size_t npeers;
    struct lookup cache;
    bool looking, found, fetched; /* fetched: the cache was handed out this turn (it stays as it is) */
    struct peer *asked; /* one slot per static peer while they are asked (name "" if none answered) */
    size_t outstanding;
} fab;

bool peers_start(const char *fabric_dir, const char *address, uint16_t port, const struct address *peers,
                 size_t npeers, char *error, size_t error_len)
{
    if (strlen(fabric_dir) >= sizeof fab.dir) {
        snprintf(error, error_len, "--fabric-dir %.64s...: too long", fabric_dir);
        return false;
    }
    strcpy(fab.dir, fabric_dir);
    snprintf(fab.own, sizeof fab.own, "%s", current_node()->name);
    fab.address = address;
    fab.port = port;
    fab.peers = peers;
    fab.npeers = npeers;
    return true;
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

void describe_node(struct buf *b)
{
    const struct node *node = current_node();
    describe(b, node->name, fab.address, fab.port, node->ports, node->nports);
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
    while ((n = read(fd, chunk, sizeof chunk)) > 0 && b.len <= MAX_ENTRY)
        buf_add(&b, chunk, (size_t)n);
    close(fd);
    if (n < 0 || b.failed || b.len > MAX_ENTRY || b.p == NULL) {
        buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

void fabric_publish(void)
{
    struct buf text = {0};
    describe_node(&text);
    char path[sizeof fab.dir + NODE_NAME_MAX + 8];
    snprintf(path, sizeof path, "%s/%s.json", fab.dir, fab.own);
    if (text.failed || make_dirs(fab.dir) < 0 || atomic_write(path, text.p, text.len, 0600) < 0) {
        say("cannot publish %s: %s", path, text.failed ? "out of memory" : strerror(errno));
        buf_free(&text);
        return;
    }
    free(fab.published);
    fab.published = text.p;
}

void fabric_withdraw(void)
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
            for (size_t i = 0; i < fab.npeers; i++)
                fabric_describe(i, &fab.peers[i]);
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

void peer_described(size_t slot, const char *text, size_t len, const char *problem)
{
    const struct address *to = &fab.peers[slot];
    struct peer p;
    if (problem == NULL)
        problem = read_description(text, len, &p);
    if (problem != NULL) {
        say("peer %s:%u unreachable: %s", to->host, to->port, problem);
    } else if (fab.asked != NULL) {
        /* reach it where we were told to, whatever address it listens on */
        snprintf(p.address, sizeof p.address, "%s", to->host);
        p.port = to->port;
        fab.asked[slot] = p;
    } else {
        free_peer(&p);
    }
    if (fab.looking && --fab.outstanding == 0) {
        lookup_done();
        fab.found = true;
    }
}

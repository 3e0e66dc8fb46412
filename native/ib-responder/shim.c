/* The shim's Unix socket (SOCK_SEQPACKET) and its clients, one per umad/issm device a tool opened.
 *
 * Protocol (packages/sim-ib/README.md, "Shim wire protocol"): the first packet is HELLO, answered HELLO_ACK;
 * then a packet shorter than the 64-byte ib_user_mad_hdr is a control packet (REGISTER, UNREGISTER) and any
 * other one a MAD (main.c answers it).  Integers are little-endian (host order).  A malformed packet is
 * dropped with a line in the log; an empty one, like the end of the connection, closes it.
 *
 * Who may hold a connection (SO_PEERCRED): root and the responder's own user (the node's tools) up to
 * MAX_CLIENTS; any other user a socket group lets in at most MAX_CLIENTS_PER_USER at once, and all of them
 * together never the last RESERVED_CLIENTS.  A connection that has not said HELLO within HELLO_WITHIN_MS,
 * or a umad one that holds no agent and has sent nothing for IDLE_MS (it can receive nothing), is closed. */
#include "responder.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

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
#define MAX_CLIENTS 1024
#define RESERVED_CLIENTS 256
#define MAX_CLIENTS_PER_USER 64
#define HELLO_WITHIN_MS 2000
#define IDLE_MS 30000

static struct {
    int listener;
    struct client *clients;
    size_t nclients;
    uint64_t next_serial;
    uint64_t refused; /* connections turned away (logged at 1, 2, 4, 8 ...) */
} g = {.listener = -1};

struct client *client_by_serial(uint64_t serial)
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
bool send_umad(struct client *c, const struct umad *u)
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
        c->issm = get_le32(packet + 12) == 1; /* device kind: 0 umad, 1 issm */
        status = c->hca_index < current_node()->nports ? 0 : ENODEV;
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
    c->active_ms = now_ms();
    if (!c->greeted)
        hello(c, packet, len);
    else if (len < UMAD_HDR_SIZE)
        control(c, packet, len);
    else
        tool_mad(c, packet, (size_t)len);
}

static bool privileged(uid_t uid) { return uid == 0 || uid == geteuid(); }

/* Whether a connection of uid may be held now; why not in *why. */
static bool admitted(uid_t uid, const char **why)
{
    size_t mine = 0, others = 0;
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->fd >= 0 && !privileged(c->uid))
            others++, mine += c->uid == uid;
    return admission((struct admission){g.nclients, MAX_CLIENTS, RESERVED_CLIENTS, MAX_CLIENTS_PER_USER},
                     privileged(uid), mine, others, why);
}

static void accept_client(void)
{
    int fd = accept4(g.listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct ucred cred = {.uid = (uid_t)-1};
    socklen_t len = sizeof cred;
    const char *why = "out of memory";
    struct client *c = NULL;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || len != sizeof cred)
        why = "no peer credentials";
    else if (admitted(cred.uid, &why))
        c = calloc(1, sizeof *c);
    if (c == NULL) {
        if ((g.refused & (g.refused + 1)) == 0) /* the 1st, 2nd, 4th, 8th ... */
            say("refusing a connection of uid %ld: %s (%llu refused)", cred.uid == (uid_t)-1 ? -1L : (long)cred.uid,
                why, (unsigned long long)g.refused + 1);
        g.refused++;
        close(fd);
        return;
    }
    c->fd = fd;
    c->uid = cred.uid;
    c->active_ms = now_ms();
    c->serial = ++g.next_serial;
    c->next = g.clients;
    g.clients = c;
    g.nclients++;
}

static uint64_t idle_at(const struct client *c)
{
    if (!c->greeted)
        return c->active_ms + HELLO_WITHIN_MS;
    /* an open issm holds the port's IsSM bit as long as it is open: it is never idle */
    return c->nagents == 0 && !c->issm ? c->active_ms + IDLE_MS : UINT64_MAX;
}

uint64_t shim_deadline(void)
{
    uint64_t earliest = UINT64_MAX;
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->fd >= 0 && idle_at(c) < earliest)
            earliest = idle_at(c);
    return earliest;
}

void shim_expire(uint64_t now)
{
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->fd >= 0 && idle_at(c) <= now)
            gone(c, c->greeted ? "idle, with no agent" : "no HELLO in time");
}

/* The gid of $MOKKA_IB_SOCKET_GROUP (-1: unset); /etc/group is read directly (a static program has no NSS). */
long shim_socket_group(void)
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

/* Bind the shim's socket at path, already restricted (the umask makes its mode), and listen at once: the
 * socket appearing is the ready marker.  (It is not bound under another name and renamed into place: the
 * shim knows the responder's sockets by the address they were bound to.) */
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

bool shim_listen(const char *path, long gid)
{
    g.listener = bind_socket(path, gid);
    return g.listener >= 0;
}

size_t shim_pollfds(struct pollfd *fds, void **owners, size_t cap)
{
    size_t n = 0;
    if (g.listener >= 0 && n < cap)
        fds[n] = (struct pollfd){.fd = g.listener, .events = POLLIN}, owners[n++] = &g;
    for (struct client *c = g.clients; c != NULL && n < cap; c = c->next)
        if (c->fd >= 0)
            fds[n] = (struct pollfd){.fd = c->fd, .events = POLLIN}, owners[n++] = c;
    return n;
}

size_t shim_clients(void) { return g.nclients; }

void shim_event(void *owner)
{
    if (owner == &g) {
        accept_client();
        return;
    }
    struct client *c = owner;
    if (c->fd >= 0)
        receive(c);
}

void shim_sweep(void)
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
}

void shim_stop(const char *path)
{
    for (struct client *c = g.clients; c != NULL; c = c->next)
        if (c->fd >= 0)
            close(c->fd);
    if (g.listener >= 0) {
        close(g.listener);
        unlink(path);
    }
    g.listener = -1;
}

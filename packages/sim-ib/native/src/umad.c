/*
 * mokka-ib shim, UMAD part: /dev/infiniband/umad<n> and issm<n> become connections to the responder.
 *
 * open() of a umad/issm node returns a SOCK_SEQPACKET Unix socket connected to the node's
 * responder (protocol: ../README.md, "Shim wire protocol"); with no responder listening the real
 * open() runs, so a host's real HCAs keep working (and a simulated node without a driver says ENXIO).  libibumad then read()s, write()s
 * and poll()s it exactly as it would the kernel's file: one struct ib_user_mad per packet.
 * Only the agent ioctls need translating; they become short control packets.  Any other
 * socket of the process is left alone, except that RDMA netlink is refused so libibverbs
 * enumerates devices from sysfs (which is what the simulation stages).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <rdma/ib_user_mad.h>
#include <rdma/rdma_user_ioctl.h>

#include "shim.h"

/* ---- protocol constants (README "Shim wire protocol") ---------------------------------------- */
#define CTL_MAGIC 0x42494b4dU /* "MKIB" little-endian */
#define PROTOCOL_VERSION 1
enum { CTL_HELLO = 1, CTL_REGISTER = 2, CTL_UNREGISTER = 3, CTL_HELLO_ACK = 129 };
enum { DEV_UMAD = 0, DEV_ISSM = 1 };
#define HELLO_TIMEOUT_MS 2000

struct ctl_hello {
    uint32_t magic, kind, version, device_kind, index;
};
struct ctl_ack {
    uint32_t magic, kind, status;
};
struct ctl_register {
    uint32_t magic, kind, agent_id;
    uint8_t qpn, mgmt_class, class_version, rmpp_version;
    uint8_t oui[3], pad;
    uint32_t method_mask[4];
};
struct ctl_unregister {
    uint32_t magic, kind, agent_id;
};

_Static_assert(sizeof(struct ctl_register) < sizeof(struct ib_user_mad_hdr), "control packets must be shorter than a MAD header");

/* ---- utilities -------------------------------------------------------------------------------- */

static unsigned next_agent_id;

/* "/dev/infiniband/umad3" -> (DEV_UMAD, 3); -1 if the path is not a umad/issm node. */
static int parse_mad_path(const char *path, int *kind, unsigned *index)
{
    static const char prefix[] = "/dev/infiniband/";
    if (path == NULL || strncmp(path, prefix, sizeof(prefix) - 1) != 0)
        return -1;
    const char *name = path + sizeof(prefix) - 1;
    const char *digits;
    if (strncmp(name, "umad", 4) == 0) {
        *kind = DEV_UMAD;
        digits = name + 4;
    } else if (strncmp(name, "issm", 4) == 0) {
        *kind = DEV_ISSM;
        digits = name + 4;
    } else {
        return -1;
    }
    if (*digits == '\0')
        return -1;
    unsigned value = 0;
    for (const char *c = digits; *c; c++) {
        if (*c < '0' || *c > '9' || value > 100000)
            return -1;
        value = value * 10 + (unsigned)(*c - '0');
    }
    *index = value;
    return 0;
}

static int wait_readable(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n;
    do {
        n = poll(&pfd, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* Connect to the responder and introduce ourselves; the socket fd, or -1 with errno set.
 * *reached tells whether a responder was there at all (if not, the real device node decides). */
static int connect_responder(int kind, unsigned index, int flags, int *reached)
{
    *reached = 0;
    const char *path = shim_socket_path();
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(addr.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | ((flags & O_CLOEXEC) ? SOCK_CLOEXEC : 0), 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        DBG("no responder at %s (%s): opening the device node itself", path, strerror(errno));
        close(fd);
        return -1;
    }
    *reached = 1;
    struct ctl_hello hello = {CTL_MAGIC, CTL_HELLO, PROTOCOL_VERSION, (uint32_t)kind, index};
    struct ctl_ack ack = {0};
    if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello) ||
        wait_readable(fd, HELLO_TIMEOUT_MS) <= 0 || recv(fd, &ack, sizeof(ack), 0) != (ssize_t)sizeof(ack) ||
        ack.magic != CTL_MAGIC || ack.kind != CTL_HELLO_ACK || ack.status != 0) {
        DBG("responder at %s refused %s%u (status %u)", path, kind == DEV_ISSM ? "issm" : "umad", index, ack.status);
        close(fd);
        errno = ack.status ? (int)ack.status : ENXIO;
        return -1;
    }
    if (flags & O_NONBLOCK)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    DBG("%s%u -> fd %d via %s", kind == DEV_ISSM ? "issm" : "umad", index, fd, path);
    return fd;
}

/* Is fd one of our responder connections?  Stateless: asks the socket itself. */
static int is_responder_socket(int fd)
{
    int type = 0;
    socklen_t len = sizeof(type);
    struct sockaddr_un peer;
    socklen_t peer_len = sizeof(peer);
    int saved = errno;
    int ours = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET &&
               getpeername(fd, (struct sockaddr *)&peer, &peer_len) == 0 && peer.sun_family == AF_UNIX &&
               strncmp(peer.sun_path, shim_socket_path(), sizeof(peer.sun_path)) == 0;
    errno = saved;
    return ours;
}

static int send_control(int fd, const void *packet, size_t size)
{
    return send(fd, packet, size, MSG_NOSIGNAL) == (ssize_t)size ? 0 : -1;
}

static int register_agent(int fd, uint32_t *id_out, uint8_t qpn, uint8_t mgmt_class, uint8_t version,
                          const uint8_t oui[3], uint8_t rmpp, const uint32_t mask[4])
{
    struct ctl_register reg = {.magic = CTL_MAGIC, .kind = CTL_REGISTER};
    reg.agent_id = __atomic_fetch_add(&next_agent_id, 1, __ATOMIC_RELAXED);
    reg.qpn = qpn;
    reg.mgmt_class = mgmt_class;
    reg.class_version = version;
    reg.rmpp_version = rmpp;
    memcpy(reg.oui, oui, 3);
    memcpy(reg.method_mask, mask, sizeof(reg.method_mask));
    if (send_control(fd, &reg, sizeof(reg)) < 0)
        return -1;
    *id_out = reg.agent_id;
    DBG("fd %d: agent %u for class 0x%02x version %u", fd, reg.agent_id, mgmt_class, version);
    return 0;
}

static int mad_ioctl(int fd, unsigned long request, void *arg)
{
    switch (request) {
    case IB_USER_MAD_ENABLE_PKEY:
        return 0;
    case IB_USER_MAD_REGISTER_AGENT: {
        struct ib_user_mad_reg_req *req = arg;
        uint32_t mask[4];
        memcpy(mask, req->method_mask, sizeof(mask));
        return register_agent(fd, &req->id, req->qpn, req->mgmt_class, req->mgmt_class_version, req->oui,
                              req->rmpp_version, mask);
    }
    case IB_USER_MAD_REGISTER_AGENT2: {
        struct ib_user_mad_reg_req2 *req = arg;
        uint32_t mask[4];
        uint8_t oui[3] = {(uint8_t)(req->oui >> 16), (uint8_t)(req->oui >> 8), (uint8_t)req->oui};
        memcpy(mask, req->method_mask, sizeof(mask));
        return register_agent(fd, &req->id, (uint8_t)req->qpn, req->mgmt_class, req->mgmt_class_version, oui,
                              req->rmpp_version, mask);
    }
    case IB_USER_MAD_UNREGISTER_AGENT: {
        struct ctl_unregister unreg = {CTL_MAGIC, CTL_UNREGISTER, *(uint32_t *)arg};
        return send_control(fd, &unreg, sizeof(unreg));
    }
    default:
        errno = ENOTTY;
        return -1;
    }
}

/* *handled: the call was answered here; otherwise it goes to the real open (other paths, or no responder). */
static int open_common(const char *path, int flags, int *handled)
{
    int kind;
    unsigned index;
    *handled = 0;
    if (parse_mad_path(path, &kind, &index) != 0)
        return -1;
    int saved = errno;
    int fd = connect_responder(kind, index, flags, handled);
    if (!*handled)
        errno = saved;
    return fd;
}

/* ---- Overridden libc functions ---------------------------------------------------------------- */

#define WRAP_OPEN(name)                                                   \
    int name(const char *path, int flags, ...)                            \
    {                                                                     \
        libc_func(name, int, const char *, int, ...);                     \
        int handled, fd = open_common(path, flags, &handled);             \
        if (handled)                                                      \
            return fd;                                                    \
        va_list ap;                                                       \
        va_start(ap, flags);                                              \
        mode_t mode = va_arg(ap, mode_t);                                 \
        va_end(ap);                                                       \
        return _##name(path, flags, mode);                                \
    }

#define WRAP_OPENAT(name)                                                 \
    int name(int dirfd, const char *path, int flags, ...)                 \
    {                                                                     \
        libc_func(name, int, int, const char *, int, ...);                \
        int handled, fd = open_common(path, flags, &handled);             \
        if (handled)                                                      \
            return fd;                                                    \
        va_list ap;                                                       \
        va_start(ap, flags);                                              \
        mode_t mode = va_arg(ap, mode_t);                                 \
        va_end(ap);                                                       \
        return _##name(dirfd, path, flags, mode);                         \
    }

#define WRAP_OPEN_2(name)                                                 \
    int name(const char *path, int flags)                                 \
    {                                                                     \
        libc_func(name, int, const char *, int);                          \
        int handled, fd = open_common(path, flags, &handled);             \
        return handled ? fd : _##name(path, flags);                       \
    }

#define WRAP_OPENAT_2(name)                                               \
    int name(int dirfd, const char *path, int flags)                      \
    {                                                                     \
        libc_func(name, int, int, const char *, int);                     \
        int handled, fd = open_common(path, flags, &handled);             \
        return handled ? fd : _##name(dirfd, path, flags);                \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)
WRAP_OPEN_2(__open_2)
WRAP_OPEN_2(__open64_2)
WRAP_OPENAT_2(__openat_2)
WRAP_OPENAT_2(__openat64_2)

int ioctl(int fd, unsigned long request, ...)
{
    libc_func(ioctl, int, int, unsigned long, ...);
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (_IOC_TYPE(request) == RDMA_IOCTL_MAGIC && is_responder_socket(fd))
        return mad_ioctl(fd, request, arg);
    return _ioctl(fd, request, arg);
}

int socket(int domain, int type, int protocol)
{
    libc_func(socket, int, int, int, int);
    if (domain == AF_NETLINK && protocol == NETLINK_RDMA) {
        DBG("refusing an RDMA netlink socket: devices come from the staged sysfs");
        errno = EPROTONOSUPPORT;
        return -1;
    }
    return _socket(domain, type, protocol);
}

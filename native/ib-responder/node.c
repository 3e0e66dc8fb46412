/* The node file: what the responder serves, staged by sim-ib beside sysfs (mokka_sim_ib.config writes it).
 *
 * Line-oriented and versioned (packages/sim-ib/README.md, "The node file"): "mokka-ib-node 3", the node's
 * "KEY VALUE" lines, "port N" and that port's lines for each port in index order, "end".  Every key is in
 * one of the two tables below (no per-key code); each is given exactly once.  Anything else (an unknown or
 * repeated key, a number out of range, a truncated file) is an error naming the file and the line. */
#include "responder.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "mokka-ib-node 3"
#define MAX_FILE (1u << 20)
#define MAX_LINE 1024

enum kind { U8, U16, U32, U64, TEXT };
struct field {
    const char *key;
    enum kind kind;
    size_t offset, size; /* size: a TEXT's buffer */
};

#define PORT_FIELD(key, kind) {#key, kind, offsetof(struct port, key), sizeof(((struct port *)0)->key)}
static const struct field port_fields[] = {
    PORT_FIELD(hca, TEXT),         PORT_FIELD(node_guid, U64),    PORT_FIELD(port_guid, U64),
    PORT_FIELD(lid, U16),          PORT_FIELD(sm_lid, U16),       PORT_FIELD(state, U8),
    PORT_FIELD(phys_state, U8),    PORT_FIELD(width_active, U8),  PORT_FIELD(speed_active, U8),
    PORT_FIELD(speed_ext_active, U8), PORT_FIELD(cap_mask, U32),  PORT_FIELD(device_id, U16),
    PORT_FIELD(revision, U32),     PORT_FIELD(vendor_id, U32),    PORT_FIELD(node_desc, TEXT),
};
#define NODE_FIELD(key, member, kind) {key, kind, offsetof(struct node, member), sizeof(((struct node *)0)->member)}
static const struct field node_fields[] = {
    NODE_FIELD("node_name", name, TEXT), NODE_FIELD("gid_prefix", gid_prefix, U64),
    NODE_FIELD("sm_lid", sm_lid, U16),   NODE_FIELD("sm_guid", sm_guid, U64),
    NODE_FIELD("su_size", su_size, U32), NODE_FIELD("rails", rails, U32),
    NODE_FIELD("spines", spines, U32),   NODE_FIELD("switch_guid", switch_guid, U64),
    {"ports", U32, 0, 0}, /* the count: read into a local, not the struct */
};
#define N_PORT_FIELDS (sizeof port_fields / sizeof port_fields[0])
#define N_NODE_FIELDS (sizeof node_fields / sizeof node_fields[0])

/* text for a message: printable ASCII kept, anything else '?' (the file may hold any bytes) */
static const char *shown(const char *text, char *out, size_t cap)
{
    size_t n = 0;
    for (; *text && n + 1 < cap; text++)
        out[n++] = *text >= 0x20 && *text < 0x7f ? *text : '?';
    out[n] = '\0';
    return out;
}

static bool fail(char *error, size_t len, const char *path, size_t line, const char *format, ...)
{
    char what[256];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    if (line)
        snprintf(error, len, "%s: line %zu: %s", path, line, what);
    else
        snprintf(error, len, "%s: %s", path, what);
    return false;
}

static bool parse_number(const char *text, uint64_t max, uint64_t *value)
{
    int base = 10;
    if (text[0] == '0' && text[1] == 'x') {
        base = 16;
        text += 2;
    }
    if (*text == '\0')
        return false;
    uint64_t v = 0;
    for (; *text; text++) {
        int digit;
        if (*text >= '0' && *text <= '9')
            digit = *text - '0';
        else if (base == 16 && *text >= 'a' && *text <= 'f')
            digit = *text - 'a' + 10;
        else
            return false;
        if (v > (max - (uint64_t)digit) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)digit;
    }
    *value = v;
    return true;
}

/* Store value into the field at base; NULL, or what is wrong with it. */
static const char *store(const struct field *f, void *base, const char *value)
{
    static const uint64_t max[] = {[U8] = UINT8_MAX, [U16] = UINT16_MAX, [U32] = UINT32_MAX, [U64] = UINT64_MAX};
    if (f->kind == TEXT) {
        if (strlen(value) >= f->size)
            return "too long";
        for (const unsigned char *c = (const unsigned char *)value; *c; c++)
            if (*c < 0x20 || *c == 0x7f)
                return "holds a control character";
        memcpy((char *)base + f->offset, value, strlen(value) + 1);
        return NULL;
    }
    uint64_t v;
    if (!parse_number(value, max[f->kind], &v))
        return "not a number in range (decimal, or 0x and lower-case hex)";
    uint8_t *at = (uint8_t *)base + f->offset;
    switch (f->kind) {
    case U8: *at = (uint8_t)v; break;
    case U16: { uint16_t x = (uint16_t)v; memcpy(at, &x, sizeof x); break; }
    case U32: { uint32_t x = (uint32_t)v; memcpy(at, &x, sizeof x); break; }
    default: memcpy(at, &v, sizeof v); break;
    }
    return NULL;
}

static int find(const struct field *fields, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(fields[i].key, key) == 0)
            return (int)i;
    return -1;
}

static char *read_file(const char *path, size_t *len, int *problem)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *problem = errno;
        return NULL;
    }
    char *data = malloc(MAX_FILE + 1);
    size_t got = 0;
    ssize_t n = 0;
    while (data != NULL && got <= MAX_FILE && (n = read(fd, data + got, MAX_FILE + 1 - got)) > 0)
        got += (size_t)n;
    *problem = data == NULL ? ENOMEM : n < 0 ? errno : got > MAX_FILE ? EFBIG : 0;
    close(fd);
    if (*problem) {
        free(data);
        return NULL;
    }
    *len = got;
    return data;
}

bool node_load(const char *path, struct node *node, char *error, size_t error_len)
{
    size_t len;
    int problem;
    char *data = read_file(path, &len, &problem);
    if (data == NULL)
        return fail(error, error_len, path, 0, "%s", strerror(problem));
    bool ok = node_parse(path, data, len, node, error, error_len);
    free(data);
    return ok;
}

bool node_parse(const char *path, char *data, size_t len, struct node *node, char *error, size_t error_len)
{
    struct node n = {0};
    bool node_seen[N_NODE_FIELDS] = {0}, port_seen[N_PORT_FIELDS] = {0};
    uint64_t declared = 0;
    size_t line_no = 0, started = 0;
    bool in_port = false, ended = false, ok = false;
    char *line = data, *end = data + len;
    while (line < end) {
        char *nl = memchr(line, '\n', (size_t)(end - line));
        line_no++;
        if (nl == NULL) {
            fail(error, error_len, path, line_no, "no newline at the end (a truncated file?)");
            goto out;
        }
        *nl = '\0';
        if ((size_t)(nl - line) > MAX_LINE || memchr(line, '\0', (size_t)(nl - line)) != NULL) {
            fail(error, error_len, path, line_no, "longer than %d bytes, or holds a NUL", MAX_LINE);
            goto out;
        }
        if (ended) {
            fail(error, error_len, path, line_no, "text after \"end\"");
            goto out;
        }
        if (line_no == 1) {
            if (strcmp(line, MAGIC) != 0) {
                fail(error, error_len, path, line_no, "not a sim-ib node file (expected \"%s\")", MAGIC);
                goto out;
            }
            line = nl + 1;
            continue;
        }
        char *value = strchr(line, ' ');
        if (value != NULL)
            *value++ = '\0';
        else
            value = nl; /* "" */
        bool closes = strcmp(line, "port") == 0 || strcmp(line, "end") == 0;
        if (closes && in_port) {
            for (size_t i = 0; i < N_PORT_FIELDS; i++)
                if (!port_seen[i]) {
                    fail(error, error_len, path, line_no, "port %zu has no %s", started - 1, port_fields[i].key);
                    goto out;
                }
        }
        if (closes && !in_port) {
            for (size_t i = 0; i < N_NODE_FIELDS; i++)
                if (!node_seen[i]) {
                    fail(error, error_len, path, line_no, "no %s before the ports", node_fields[i].key);
                    goto out;
                }
            if (!node_name_ok(n.name)) {
                char name[81];
                fail(error, error_len, path, 0, "node_name is not a DNS-1123 subdomain: %s",
                     shown(n.name, name, sizeof name));
                goto out;
            }
            if (n.su_size == 0 || n.rails == 0 || n.spines > SWITCH_PORTS || n.su_size > SWITCH_PORTS - n.spines) {
                fail(error, error_len, path, 0, "su_size %u, rails %u, spines %u: a leaf has %d ports for su_size + "
                     "spines (su_size and rails at least 1)", n.su_size, n.rails, n.spines, SWITCH_PORTS);
                goto out;
            }
        }
        if (strcmp(line, "end") == 0) {
            if (*value || started != declared) {
                fail(error, error_len, path, line_no, "\"end\" after %zu of %llu ports", started,
                     (unsigned long long)declared);
                goto out;
            }
            ended = true;
        } else if (strcmp(line, "port") == 0) {
            uint64_t index;
            if (!parse_number(value, UINT32_MAX, &index) || index != started || started >= declared) {
                fail(error, error_len, path, line_no, "expected \"port %zu\" (of %llu)", started,
                     (unsigned long long)declared);
                goto out;
            }
            struct port *p = &n.ports[started++];
            p->index = (uint32_t)index;
            memcpy(p->node_name, n.name, sizeof p->node_name);
            memset(port_seen, 0, sizeof port_seen);
            in_port = true;
        } else {
            const struct field *fields = in_port ? port_fields : node_fields;
            bool *seen = in_port ? port_seen : node_seen;
            int at = find(fields, in_port ? N_PORT_FIELDS : N_NODE_FIELDS, line);
            if (at < 0 || seen[at]) {
                char key[65];
                fail(error, error_len, path, line_no, "%s key %s%s", at < 0 ? "unknown" : "repeated",
                     shown(line, key, sizeof key), in_port ? " in a port" : "");
                goto out;
            }
            seen[at] = true;
            const char *wrong;
            if (!in_port && strcmp(line, "ports") == 0) {
                if (!parse_number(value, MAX_PORTS, &declared)) {
                    fail(error, error_len, path, line_no, "ports: not a count up to %d", MAX_PORTS);
                    goto out;
                }
                n.ports = calloc(declared ? declared : 1, sizeof *n.ports);
                if (n.ports == NULL) {
                    fail(error, error_len, path, line_no, "out of memory");
                    goto out;
                }
            } else if ((wrong = store(&fields[at], in_port ? (void *)&n.ports[started - 1] : (void *)&n, value))) {
                fail(error, error_len, path, line_no, "%s: %s", line, wrong);
                goto out;
            }
        }
        line = nl + 1;
    }
    if (line_no == 0)
        fail(error, error_len, path, 0, "empty (not a sim-ib node file)");
    else if (!ended)
        fail(error, error_len, path, 0, "no \"end\" line (a truncated file?)");
    else
        ok = true;
out:
    if (!ok) {
        free(n.ports);
        return false;
    }
    n.nports = started;
    *node = n;
    return true;
}

void node_free(struct node *node)
{
    free(node->ports);
    node->ports = NULL;
    node->nports = 0;
}

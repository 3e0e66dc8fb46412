/* Management datagrams: the kernel's struct ib_user_mad framing, and what the fabric answers.
 *
 * Layouts follow the InfiniBand Architecture Specification vol. 1 (MAD common header 13.4.3, SMP 14.2.1,
 * NodeInfo 14.2.5.3, NodeDescription 14.2.5.2, SwitchInfo 14.2.5.4, PortInfo 14.2.5.6, SMInfo 14.2.5.13,
 * PathRecord 15.2.5.16, PerfMgmt ClassPortInfo 13.4.8.1, PortCounters 16.1.3.5) and <rdma/ib_user_mad.h> (header ABI 5).  MAD
 * fields are big-endian; the ib_user_mad_hdr integers are host-endian except its __be ones. */
#include "responder.h"

#include <errno.h>
#include <string.h>

#define ATTR_CLASS_PORT_INFO 0x0001
#define ATTR_NODE_DESC 0x0010
#define ATTR_NODE_INFO 0x0011
#define ATTR_PORT_COUNTERS 0x0012
#define ATTR_SWITCH_INFO 0x0012
#define ATTR_PORT_INFO 0x0015
#define ATTR_SM_INFO 0x0020
#define ATTR_PATH_RECORD 0x0035
#define METHOD_GET_RESP 0x81
#define STATUS_UNSUPPORTED_ATTRIBUTE 0x000C /* "method/attribute combination not supported" */
#define STATUS_SA_NO_RECORDS 0x0300

#define SMP_DATA 64
#define SMP_INITIAL_PATH 128
#define SMP_PATH_LEN 64
#define VENDOR_RANGE2_DATA 40
#define SA_DATA 56
#define PERF_DATA 64

/* ---- struct ib_user_mad (ABI 5: a 64-byte header, then the MAD) ---------------------------------- */

static uint32_t get_host32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_host32(uint8_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

bool umad_decode(const uint8_t *packet, size_t len, struct umad *out)
{
    if (len < UMAD_HDR_SIZE + MAD_HEADER)
        return false;
    memset(out, 0, sizeof *out);
    out->agent_id = get_host32(packet + 0);
    out->status = get_host32(packet + 4);
    out->timeout_ms = get_host32(packet + 8);
    out->retries = get_host32(packet + 12);
    out->qpn = (uint32_t)get_be(packet + 20, 4);
    out->qkey = (uint32_t)get_be(packet + 24, 4);
    out->lid = (uint16_t)get_be(packet + 28, 2);
    out->sl = packet[30];
    out->grh_present = packet[32] != 0;
    memcpy(out->gid, packet + 36, 16);
    memcpy(&out->pkey_index, packet + 56, 2);
    size_t mad = len - UMAD_HDR_SIZE < MAD_SIZE ? len - UMAD_HDR_SIZE : MAD_SIZE;
    memcpy(out->mad, packet + UMAD_HDR_SIZE, mad);
    return true;
}

void umad_encode(const struct umad *u, uint8_t out[UMAD_SIZE])
{
    memset(out, 0, UMAD_HDR_SIZE);
    put_host32(out + 0, u->agent_id);
    put_host32(out + 4, u->status);
    put_host32(out + 8, u->timeout_ms);
    put_host32(out + 12, u->retries);
    put_host32(out + 16, MAD_SIZE);
    put_be(out + 20, 4, u->qpn);
    put_be(out + 24, 4, u->qkey);
    put_be(out + 28, 2, u->lid);
    out[30] = u->sl;
    out[32] = u->grh_present ? 1 : 0;
    memcpy(out + 36, u->gid, 16);
    memcpy(out + 56, &u->pkey_index, 2);
    memcpy(out + UMAD_HDR_SIZE, u->mad, MAD_SIZE);
}

uint8_t mad_class(const struct umad *u) { return u->mad[1]; }
uint8_t mad_method(const struct umad *u) { return u->mad[3]; }
uint16_t mad_attr(const struct umad *u) { return (uint16_t)get_be(u->mad + 16, 2); }
static uint32_t mad_attr_mod(const struct umad *u) { return (uint32_t)get_be(u->mad + 20, 4); }
uint64_t mad_tid(const struct umad *u) { return get_be(u->mad + 8, 8); }
bool mad_is_response(const struct umad *u) { return (mad_method(u) & RESPONSE_BIT) != 0; }
static uint8_t hop_count(const struct umad *u) { return u->mad[7]; }

void umad_timed_out(const struct umad *request, struct umad *out)
{
    *out = *request;
    out->status = ETIMEDOUT;
}

/* The GetResp the requester's agent receives: same TID and agent, method | 0x80, data at offset. */
static void response(const struct umad *req, const uint8_t *data, size_t len, size_t offset, uint16_t source_lid,
                     uint16_t status, struct umad *out)
{
    memset(out, 0, sizeof *out);
    memcpy(out->mad, req->mad, MAD_SIZE);
    out->mad[3] = mad_method(req) == METHOD_GET ? METHOD_GET_RESP : (uint8_t)(mad_method(req) | RESPONSE_BIT);
    if (mad_class(req) == CLASS_SMI_DIRECT) { /* D bit (returning) + 15-bit status; hop pointer back at the requester */
        put_be(out->mad + 4, 2, 0x8000u | status);
        out->mad[6] = (uint8_t)(hop_count(req) + 1);
    } else {
        put_be(out->mad + 4, 2, status);
    }
    if (data != NULL && offset + len <= MAD_SIZE)
        memcpy(out->mad + offset, data, len);
    out->agent_id = req->agent_id;
    out->lid = source_lid;
    out->qpn = req->qpn;
    out->qkey = req->qkey;
    out->sl = req->sl;
    out->pkey_index = req->pkey_index;
}

static void answered(struct answer *out) { out->kind = ANSWERED; }

/* ---- attributes ----------------------------------------------------------------------------------- */

static void node_info(const struct port *p, uint8_t d[40])
{
    memset(d, 0, 40);
    d[0] = 1, d[1] = 1, d[2] = 1, d[3] = 1; /* base version, class version, node type CA, one port */
    put_be(d + 4, 8, p->node_guid);          /* system image GUID */
    put_be(d + 12, 8, p->node_guid);
    put_be(d + 20, 8, p->port_guid);
    put_be(d + 28, 2, 128); /* partition cap */
    put_be(d + 30, 2, p->device_id);
    put_be(d + 32, 4, p->revision);
    d[36] = 1; /* local port number the SMP arrived on */
    put_be(d + 37, 3, p->vendor_id);
}

static void port_info(const struct port *p, uint64_t gid_prefix, uint8_t d[64])
{
    memset(d, 0, 64);
    put_be(d + 8, 8, gid_prefix);
    put_be(d + 16, 2, p->lid);
    put_be(d + 18, 2, p->sm_lid);
    put_be(d + 20, 4, p->cap_mask);
    d[28] = 1;    /* local port number */
    d[29] = 0x03; /* width enabled 1X|4X */
    d[30] = 0x03; /* width supported */
    d[31] = p->width_active;
    d[32] = (uint8_t)(0x7 << 4 | (p->state & 0xF)); /* speeds supported SDR|DDR|QDR, port state */
    d[33] = (uint8_t)((p->phys_state & 0xF) << 4 | 0x2); /* physical state, link-down default Polling */
    d[35] = (uint8_t)((p->speed_active & 0xF) << 4 | 0x7);
    d[36] = 5 << 4; /* neighbour MTU 4096, master SM SL 0 */
    d[37] = 4 << 4; /* VLCap VL0-7 */
    d[41] = 5;      /* MTUCap 4096 */
    d[43] = 4 << 4; /* operational VLs */
    d[51] = 18;     /* subnet timeout */
    d[62] = (uint8_t)((p->speed_ext_active & 0xF) << 4 | 0xF);
    d[63] = 0x1F;
}

static void smp_reply(const struct umad *req, const struct port *target, uint16_t source_lid, struct answer *out)
{
    uint8_t data[64];
    uint16_t attr = mad_attr(req);
    answered(out);
    if (mad_method(req) != METHOD_GET || (attr == ATTR_PORT_INFO && mad_attr_mod(req) > 1) ||
        (attr != ATTR_NODE_INFO && attr != ATTR_NODE_DESC && attr != ATTR_PORT_INFO)) {
        response(req, NULL, 0, 0, source_lid, STATUS_UNSUPPORTED_ATTRIBUTE, &out->reply);
        return;
    }
    size_t len = 64;
    if (attr == ATTR_NODE_INFO) {
        node_info(target, data);
        len = 40;
    } else if (attr == ATTR_NODE_DESC) {
        memset(data, 0, sizeof data);
        size_t n = strlen(target->node_desc);
        memcpy(data, target->node_desc, n < 64 ? n : 64);
    } else {
        port_info(target, current_node()->gid_prefix, data);
    }
    response(req, data, len, SMP_DATA, source_lid, 0, &out->reply);
}

/* ---- the fabric ----------------------------------------------------------------------------------- */

/* The first up port of this node or another with lid; *wait set when the peers are being looked up. */
static const struct port *port_by(uint16_t lid, uint64_t port_guid, bool by_guid, bool stale_ok, bool *wait)
{
    const struct node *node = current_node();
    for (size_t i = 0; i < node->nports; i++) {
        const struct port *p = &node->ports[i];
        if ((by_guid ? p->port_guid == port_guid : p->lid == lid) && p->state == PORT_UP)
            return p;
    }
    size_t count;
    const struct peer *peers;
    if (!fabric_peers(stale_ok, &peers, &count)) {
        *wait = true;
        return NULL;
    }
    for (size_t j = 0; j < count; j++)
        for (size_t i = 0; i < peers[j].nports; i++) {
            const struct port *p = &peers[j].ports[i];
            if ((by_guid ? p->port_guid == port_guid : p->lid == lid) && p->state == PORT_UP)
                return p;
        }
    return NULL;
}

#define MAX_MEMBERS 1025
static struct member members[MAX_MEMBERS]; /* this node and its peers (switch.c): one request at a time */

/* The SMP's answer from switch sw (reached through port `entry`), sent from source_lid. */
static void switch_reply(const struct umad *req, uint32_t sw, uint8_t entry, size_t nmembers, uint16_t source_lid,
                         struct answer *out)
{
    uint8_t data[64] = {0};
    size_t len = 64;
    uint16_t attr = mad_attr(req);
    answered(out);
    bool ok = mad_method(req) == METHOD_GET;
    if (ok && attr == ATTR_NODE_INFO) {
        switch_node_info(sw, entry, data);
        len = 40;
    } else if (ok && attr == ATTR_NODE_DESC) {
        switch_desc(sw, (char *)data, sizeof data);
    } else if (ok && attr == ATTR_SWITCH_INFO) {
        switch_info(data);
    } else if (!ok || attr != ATTR_PORT_INFO ||
               !switch_port_info(sw, entry, mad_attr_mod(req), members, nmembers, current_node()->gid_prefix, data)) {
        response(req, NULL, 0, 0, source_lid, STATUS_UNSUPPORTED_ATTRIBUTE, &out->reply);
        return;
    }
    response(req, data, len, SMP_DATA, source_lid, 0, &out->reply);
}

static void directed_smp(const struct port *local, const struct umad *req, bool stale_ok, struct answer *out)
{
    struct place at = {.kind = AT_CA, .ca = local, .entry = 1};
    size_t nmembers = 0;
    if (hop_count(req) > 0) {
        size_t count;
        const struct peer *peers;
        if (!fabric_peers(stale_ok, &peers, &count)) {
            out->kind = NEED_PEERS;
            return;
        }
        nmembers = fabric_members(peers, count, members, MAX_MEMBERS);
    }
    for (unsigned hop = 1; hop <= hop_count(req); hop++)
        if (hop >= SMP_PATH_LEN || (at.kind == AT_CA && hop > 1) || /* a CA does not forward an SMP */
            !fabric_hop(&at, req->mad[SMP_INITIAL_PATH + hop], members, nmembers, &at))
            return; /* no such route: nothing answers */
    if (at.kind == AT_CA)
        smp_reply(req, at.ca, 0xFFFF, out);
    else
        switch_reply(req, at.sw, at.entry, nmembers, 0xFFFF, out);
}

static void lid_smp(const struct umad *req, bool stale_ok, struct answer *out)
{
    const struct node *node = current_node();
    if (req->lid == node->sm_lid && mad_attr(req) == ATTR_SM_INFO) {
        uint8_t data[24] = {0};
        put_be(data, 8, node->sm_guid);
        put_be(data + 16, 4, activity());
        data[20] = 15 << 4 | 3; /* priority 15, SMState MASTER */
        response(req, data, sizeof data, SMP_DATA, req->lid, 0, &out->reply);
        answered(out);
        return;
    }
    bool wait = false;
    const struct port *target = port_by(req->lid, 0, false, stale_ok, &wait);
    if (wait) {
        out->kind = NEED_PEERS;
    } else if (target != NULL) {
        smp_reply(req, target, target->lid, out);
    } else { /* a switch's LID: it answers on port 0 */
        size_t count;
        const struct peer *peers;
        if (!fabric_peers(stale_ok, &peers, &count)) {
            out->kind = NEED_PEERS;
            return;
        }
        size_t nmembers = fabric_members(peers, count, members, MAX_MEMBERS);
        uint32_t sw;
        if (switch_by_lid(req->lid, nmembers, &sw))
            switch_reply(req, sw, 0, nmembers, req->lid, out);
    }
}

static void performance(const struct umad *req, bool stale_ok, struct answer *out)
{
    bool wait = false;
    const struct port *target = port_by(req->lid, 0, false, stale_ok, &wait);
    if (wait) {
        out->kind = NEED_PEERS;
        return;
    }
    if (target == NULL)
        return;
    answered(out);
    uint8_t data[72] = {0};
    if (mad_method(req) == METHOD_GET && mad_attr(req) == ATTR_CLASS_PORT_INFO) {
        data[0] = 1, data[1] = 1; /* base and class version 1, no optional counters */
        data[7] = 18;             /* response time 2^18 x 4.096 us */
        response(req, data, 72, PERF_DATA, target->lid, 0, &out->reply);
    } else if (mad_method(req) == METHOD_GET && mad_attr(req) == ATTR_PORT_COUNTERS) {
        data[1] = req->mad[PERF_DATA + 1]; /* PortSelect echoed; every counter zero, as the staged sysfs ones */
        response(req, data, 64, PERF_DATA, target->lid, 0, &out->reply);
    } else {
        response(req, NULL, 0, 0, target->lid, STATUS_UNSUPPORTED_ATTRIBUTE, &out->reply);
    }
}

static void subnet_administration(const struct port *local, const struct umad *req, bool stale_ok,
                                  struct answer *out)
{
    if (mad_attr(req) != ATTR_PATH_RECORD || mad_method(req) != METHOD_GET) {
        response(req, NULL, 0, 0, req->lid, STATUS_UNSUPPORTED_ATTRIBUTE, &out->reply);
        answered(out);
        return;
    }
    const uint8_t *query = req->mad + SA_DATA;
    bool wait = false;
    const struct port *target = port_by(0, get_be(query + 16, 8), true, stale_ok, &wait);
    if (wait) {
        out->kind = NEED_PEERS;
        return;
    }
    answered(out);
    if (target == NULL) {
        response(req, NULL, 0, 0, req->lid, STATUS_SA_NO_RECORDS, &out->reply);
        return;
    }
    uint8_t record[64]; /* the query, the DGID resolved */
    memcpy(record, query, sizeof record);
    put_be(record + 24, 8, current_node()->gid_prefix); /* SGID */
    put_be(record + 32, 8, local->port_guid);
    put_be(record + 40, 2, target->lid);
    put_be(record + 42, 2, local->lid);
    put_be(record + 44, 4, 0xFF); /* flow label 0, hop limit 255 */
    record[49] = 0x80 | 1;        /* reversible, one path */
    put_be(record + 50, 2, 0xFFFF);
    record[54] = 2 << 6 | 5;  /* exactly MTU 4096 */
    record[55] = 2 << 6 | 16; /* exactly 100 Gb/s+ rate code */
    record[56] = 2 << 6 | 18;
    response(req, record, sizeof record, SA_DATA, req->lid, 0, &out->reply);
    put_be(out->reply.mad + 44, 2, 0); /* SA attribute offset (one record, no RMPP) */
}

void deliver_ping(const struct umad *req, uint16_t source_lid, struct answer *out)
{
    const struct node *node = current_node();
    const struct port *port = NULL;
    for (size_t i = 0; i < node->nports && port == NULL; i++)
        if (node->ports[i].lid == req->lid)
            port = &node->ports[i];
    if (port == NULL || port->state != PORT_UP)
        return;
    uint32_t agent;
    struct client *server = ping_server(port->index, req->mad + 37, &agent);
    if (server == NULL) { /* what `ibping -S` would answer: its host name, NUL-terminated, in the vendor data */
        uint8_t name[MAD_SIZE - VENDOR_RANGE2_DATA] = {0};
        size_t n = strlen(node->name) < sizeof name - 1 ? strlen(node->name) : sizeof name - 1;
        memcpy(name, node->name, n);
        response(req, name, n + 1, VENDOR_RANGE2_DATA, req->lid, 0, &out->reply);
        answered(out);
        return;
    }
    out->kind = TO_PING_SERVER;
    out->server = server;
    memset(&out->delivered, 0, sizeof out->delivered);
    out->delivered.agent_id = agent;
    out->delivered.lid = source_lid;
    out->delivered.qpn = 1;
    out->delivered.qkey = req->qkey;
    out->delivered.sl = req->sl;
    memcpy(out->delivered.mad, req->mad, MAD_SIZE);
}

void ping_server_answered(const struct umad *req, const struct umad *server_answer, struct umad *out)
{
    /* back to the requester's agent, from the port that was pinged */
    memset(out, 0, sizeof *out);
    out->agent_id = req->agent_id;
    out->lid = req->lid;
    out->qpn = server_answer->qpn;
    out->qkey = server_answer->qkey;
    out->sl = server_answer->sl;
    memcpy(out->mad, server_answer->mad, MAD_SIZE);
}

static void ping(const struct port *local, const struct umad *req, bool stale_ok, struct answer *out)
{
    const struct node *node = current_node();
    for (size_t i = 0; i < node->nports; i++)
        if (node->ports[i].lid == req->lid) {
            deliver_ping(req, local->lid, out);
            return;
        }
    size_t count;
    const struct peer *peers;
    if (!fabric_peers(stale_ok, &peers, &count)) {
        out->kind = NEED_PEERS;
        return;
    }
    for (size_t j = 0; j < count; j++)
        for (size_t i = 0; i < peers[j].nports; i++)
            if (peers[j].ports[i].lid == req->lid && peers[j].ports[i].state == PORT_UP) {
                out->kind = RELAY;
                out->peer = &peers[j];
                out->relay_slid = local->lid;
                return;
            }
}

void answer_mad(const struct port *local, const struct umad *req, bool stale_ok, struct answer *out)
{
    memset(out, 0, sizeof *out);
    out->kind = NO_ANSWER;
    uint8_t method = mad_method(req);
    if (mad_is_response(req) || (method != METHOD_GET && method != METHOD_SET))
        return;
    uint8_t class = mad_class(req);
    if (class == CLASS_SMI_DIRECT)
        directed_smp(local, req, stale_ok, out);
    else if (local->state != PORT_UP)
        return; /* nothing leaves a port whose link is down */
    else if (class == CLASS_SMI)
        lid_smp(req, stale_ok, out);
    else if (class == CLASS_SA && req->lid == current_node()->sm_lid)
        subnet_administration(local, req, stale_ok, out);
    else if (class == CLASS_OPENIB_PING)
        ping(local, req, stale_ok, out);
    else if (class == CLASS_PERF)
        performance(req, stale_ok, out);
}

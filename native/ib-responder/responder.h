/* mokka-ib-responder: the MAD responder of one simulated node's HCAs (sim-ib's service).
 * Contract: packages/sim-ib/README.md ("Serving", "Shim wire protocol", "Between nodes (TCP)"). */
#ifndef MOKKA_IB_RESPONDER_H
#define MOKKA_IB_RESPONDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service.h" /* say, atomic_write */

#define PROGRAM "mokka-ib-responder"

/* ---- util.c ------------------------------------------------------------------------------------- */
uint64_t now_ms(void);
uint64_t get_be(const uint8_t *p, size_t n);
void put_be(uint8_t *p, size_t n, uint64_t v);
/* A node name as Kubernetes takes one (DNS-1123 subdomain, at most 253 characters): files are named after it. */
bool node_name_ok(const char *name);

/* A growable byte string; on allocation failure it stays as it was and .failed is set. */
struct buf {
    char *p;
    size_t len, cap;
    bool failed;
};
void buf_add(struct buf *b, const void *data, size_t n);
void buf_printf(struct buf *b, const char *format, ...) __attribute__((format(printf, 2, 3)));
void buf_free(struct buf *b);

/* ---- node.c: the node file (format: packages/sim-ib/README.md "The node file") ----------------- */
#define NODE_NAME_MAX 253
#define HCA_NAME_MAX 31
#define NODE_DESC_MAX 255
#define MAX_PORTS 256

struct port {
    char node_name[NODE_NAME_MAX + 1];
    char hca[HCA_NAME_MAX + 1];
    char node_desc[NODE_DESC_MAX + 1];
    uint64_t node_guid, port_guid;
    uint32_t index, cap_mask, revision, vendor_id;
    uint16_t lid, sm_lid, device_id;
    uint8_t state, phys_state, width_active, speed_active, speed_ext_active;
};

struct node {
    char name[NODE_NAME_MAX + 1];
    uint64_t gid_prefix, sm_guid;
    uint16_t sm_lid;
    uint32_t su_size, rails, spines; /* the fabric's layout (switch.c) */
    uint64_t switch_guid;
    size_t nports;
    struct port *ports;
};

/* Read path into node (freed with node_free); false with the problem in error ("PATH: line N: ..."). */
bool node_load(const char *path, struct node *node, char *error, size_t error_len);
/* The same for a file's content data[0:len] (changed in place); path only names it in the error. */
bool node_parse(const char *path, char *data, size_t len, struct node *node, char *error, size_t error_len);
void node_free(struct node *node);

/* ---- json.c: the fabric messages (fabric.c), a strict reader of what they hold ------------------ */
enum jtype { J_OBJECT, J_ARRAY, J_STRING, J_NUMBER, J_LITERAL };
struct jtok {
    uint8_t type;
    uint32_t start, end; /* the text of the value (a string's without its quotes) */
    uint32_t size;       /* an object's members, an array's elements */
    uint32_t after;      /* the index of the first token after this value's subtree */
};
/* Tokens of the one JSON value text[0:len] is; the count, or -1 (malformed, too deep, more than cap). */
int json_parse(const char *text, size_t len, struct jtok *tok, size_t cap);
/* The value of key in the object at tok[obj]; -1 if absent (or obj is no object). */
int json_get(const char *text, const struct jtok *tok, int obj, const char *key);
bool json_u64(const char *text, const struct jtok *tok, int at, uint64_t max, uint64_t *value);
/* A string value, unescaped into out (NUL-terminated); false if no string, or longer than cap - 1. */
bool json_string(const char *text, const struct jtok *tok, int at, char *out, size_t cap);
bool json_is_null(const char *text, const struct jtok *tok, int at);
void json_add_string(struct buf *b, const char *s);

/* ---- mad.c: struct ib_user_mad and the attributes answered --------------------------------------- */
#define MAD_SIZE 256
#define UMAD_HDR_SIZE 64
#define UMAD_SIZE (UMAD_HDR_SIZE + MAD_SIZE)
#define MAD_HEADER 24

#define CLASS_SMI 0x01
#define CLASS_SA 0x03
#define CLASS_PERF 0x04
#define CLASS_OPENIB_PING 0x32
#define CLASS_SMI_DIRECT 0x81
#define METHOD_GET 0x01
#define METHOD_SET 0x02
#define RESPONSE_BIT 0x80
#define PORT_UP 4 /* PortInfo:PortState ACTIVE */

struct umad {
    uint32_t agent_id, status, timeout_ms, retries, qpn, qkey;
    uint16_t lid, pkey_index; /* lid: the destination on send, the source on receive */
    uint8_t sl, grh_present;
    uint8_t gid[16];
    uint8_t mad[MAD_SIZE];
};

/* A packet's ib_user_mad (a short MAD is padded with zeros); false if shorter than the headers. */
bool umad_decode(const uint8_t *packet, size_t len, struct umad *out);
void umad_encode(const struct umad *u, uint8_t out[UMAD_SIZE]);
uint8_t mad_class(const struct umad *u);
uint8_t mad_method(const struct umad *u);
uint16_t mad_attr(const struct umad *u);
uint64_t mad_tid(const struct umad *u);
bool mad_is_response(const struct umad *u);
/* What the kernel hands back for a request nobody answered: the request, status ETIMEDOUT. */
void umad_timed_out(const struct umad *request, struct umad *out);

/* What a request MAD gets; the async kinds are finished by the caller (main.c). */
enum outcome {
    NO_ANSWER,     /* nothing answers (the sender's timeout runs out) */
    ANSWERED,      /* .reply */
    NEED_PEERS,    /* the other nodes are being looked up: ask again once they are */
    RELAY,         /* ask .peer's responder to deliver the ping (fabric "ping") */
    TO_PING_SERVER /* hand .delivered to .server (an ibping -S) and wait for its answer */
};
struct client;
struct peer;
struct answer {
    enum outcome kind;
    struct umad reply;
    const struct peer *peer; /* RELAY */
    uint16_t relay_slid;
    struct client *server; /* TO_PING_SERVER */
    struct umad delivered;
};
/* The answer to request, sent by a tool on local's HCA; stale_ok: use the peers known, however old. */
void answer_mad(const struct port *local, const struct umad *request, bool stale_ok, struct answer *out);
/* A ping arriving at one of this node's ports (from a tool here, or relayed by another node). */
void deliver_ping(const struct umad *request, uint16_t source_lid, struct answer *out);
/* The answer of a ping server (ibping -S) to delivered, as the requester's agent gets it. */
void ping_server_answered(const struct umad *request, const struct umad *server_answer, struct umad *out);

/* ---- main.c: the node, its clients, the loop ------------------------------------------------------ */
struct agent {
    uint32_t id;
    uint8_t mgmt_class, class_version;
    uint8_t oui[3];
    uint8_t method_mask[16];
};
#define MAX_AGENTS 32
struct client {
    struct client *next;
    int fd;
    bool greeted;
    bool issm; /* an issm device (else umad) */
    uint32_t hca_index;
    uint32_t uid;       /* SO_PEERCRED */
    uint64_t active_ms; /* its last packet (or its connect) */
    uint64_t serial;
    size_t nagents;
    struct agent agents[MAX_AGENTS];
};
/* The node as last read; node_refresh re-reads the file if it changed (a re-staged node is served without a
 * restart): called where a request starts only, so what an answer holds of the node stays valid. */
const struct node *current_node(void);
void node_refresh(void);
uint64_t activity(void);
/* A MAD a tool sent (shim.c hands it over): answered at once, or when the fabric has answered. */
void tool_mad(struct client *c, const uint8_t *packet, size_t len);

/* ---- shim.c: the shim's Unix socket and its clients ---------------------------------------------- */
/* The gid of $MOKKA_IB_SOCKET_GROUP, -1 if unset; exits 1 naming it if there is no such group. */
long shim_socket_group(void);
/* Bind the socket at path (mode 0600, or 0660 for gid) and listen; false (said on stderr) if it cannot. */
bool shim_listen(const char *path, long gid);
struct pollfd;
size_t shim_pollfds(struct pollfd *fds, void **owners, size_t cap);
size_t shim_clients(void);
void shim_event(void *owner);
void shim_sweep(void);
uint64_t shim_deadline(void);   /* when the next idle client is due to be closed; UINT64_MAX if none */
void shim_expire(uint64_t now); /* close the clients idle past their time (shim.c's header) */
void shim_stop(const char *path); /* close the clients and the socket, and remove it */
struct client *client_by_serial(uint64_t serial); /* NULL once it is gone */
/* Send u to c without waiting (a tool that stopped reading loses it); false if it could not be sent. */
bool send_umad(struct client *c, const struct umad *u);
/* The first client of hca_index with a ping agent (class 0x32, oui, serving GET); NULL if none. */
struct client *ping_server(uint32_t hca_index, const uint8_t oui[3], uint32_t *agent_id);

/* ---- peers.c: the other nodes (the fabric directory, static peers) ------------------------------- */
struct peer {
    char name[NODE_NAME_MAX + 1];
    char address[256];
    uint16_t port;
    size_t nports;
    struct port *ports;
};
/* An address as --listen, --peer and $MOKKA_IB_PEERS give it: HOST:PORT ([v6]:PORT; HOST may be empty). */
struct address {
    char host[256];
    uint16_t port;
};
/* This node publishes itself as reached at address:port; peers are static peers (kept, not copied). */
bool peers_start(const char *fabric_dir, const char *address, uint16_t port, const struct address *peers,
                 size_t npeers, char *error, size_t error_len);
/* Write (again) this node's entry in the fabric directory: its address and ports. */
void fabric_publish(void);
/* Remove the entry, only while it is still ours (a node of the same name may have replaced it). */
void fabric_withdraw(void);
/* This node's description: the "describe" answer and the fabric entry. */
void describe_node(struct buf *b);
/* The other nodes: the cache if fresh (or stale_ok), else looked up anew; false while static peers are
 * being asked (main.c's peers_found runs once they answered). */
bool fabric_peers(bool stale_ok, const struct peer **peers, size_t *count);
bool fabric_take_found(void); /* true once after a lookup of the peers finished without the caller */
void fabric_new_turn(void);   /* a request starts: the peers may be looked up again (once) */
/* The answer of static peer slot to "describe" (text[0:len]), or the problem met asking it. */
void peer_described(size_t slot, const char *text, size_t len, const char *problem);

/* ---- switch.c: the fabric's switches (README "The fabric") ---------------------------------------- */
#define SWITCH_PORTS 64
struct member { /* a node of the fabric: this one or a peer */
    const char *name;
    const struct port *ports;
    size_t nports;
};
/* This node and the peers, in name order (their places in the fabric); how many (at most cap). */
size_t fabric_members(const struct peer *peers, size_t count, struct member *out, size_t cap);
enum place_kind { AT_CA, AT_SWITCH };
struct place { /* where a directed route has got to */
    enum place_kind kind;
    const struct port *ca; /* AT_CA */
    uint32_t sw;           /* AT_SWITCH: spines 0.., then leaves */
    uint8_t entry;         /* the port it came in by */
};
/* What is cabled to out_port of here; false if nothing (answering) is. */
bool fabric_hop(const struct place *here, unsigned out_port, const struct member *m, size_t nmembers,
                struct place *next);
uint32_t switch_count(size_t nmembers);
uint16_t switch_lid(uint32_t sw);
bool switch_by_lid(uint16_t lid, size_t nmembers, uint32_t *sw);
void switch_desc(uint32_t sw, char *out, size_t cap);
void switch_node_info(uint32_t sw, uint8_t entry, uint8_t d[40]);
void switch_info(uint8_t d[64]);
bool switch_port_info(uint32_t sw, uint8_t entry, unsigned n, const struct member *m, size_t nmembers, uint64_t gid_prefix,
                      uint8_t d[64]);

/* ---- fabric.c: the TCP port ----------------------------------------------------------------------- */
bool parse_address(const char *text, struct address *out);
/* Listen on the first address listen resolves to; the port it got in *bound (0 in listen: any free one). */
bool fabric_start(const struct address *listen, uint16_t *bound, char *error, size_t error_len);
void fabric_stop(void); /* close everything */
/* The fabric's descriptors to poll, each with what fabric_event takes back; how many were added. */
size_t fabric_pollfds(struct pollfd *fds, void **owners, size_t cap);
void fabric_event(void *owner);
uint64_t fabric_deadline(void); /* the earliest, UINT64_MAX if none */
void fabric_expire(uint64_t now);
void fabric_sweep(void); /* free what was closed */
/* Ask static peer slot at `to` to describe itself; peer_described gets the answer, maybe at once. */
void fabric_describe(size_t slot, const struct address *to);
struct job;
struct conn;
/* Ask peer's responder to deliver a ping; main.c's job_relayed gets its answer (NULL: none), maybe at once. */
void fabric_relay(struct job *job, const struct peer *peer, const struct umad *request, uint16_t slid);
/* The answer to a ping another node relayed here (NULL: none). */
void fabric_answer_ping(struct conn *conn, const struct umad *answer);

/* ---- main.c: what fabric.c calls back ---- */
void peers_found(void);

/* One rule for both sockets: a connection is held while the total is under its cap; the privileged (root, the
 * responder's user) need only that, everyone else stays under a per-peer cap and out of the reserved last ones. */
struct admission { size_t held, cap, reserved, per_peer; };
bool admission(struct admission limits, bool privileged, size_t peers_own, size_t others, const char **why);
void job_relayed(struct job *job, const struct umad *answer);
/* A ping another node relays to one of ours: answer it with fabric_answer_ping (maybe later). */
void fabric_ping_arrived(struct conn *conn, const struct umad *request, uint16_t source_lid);
#endif

/* The fabric's switches: a rail-optimised fat tree (packages/sim-ib/README.md "The fabric").
 *
 * No switch runs anywhere: every responder builds the same switches from the same inputs, its node file's
 * layout (su_size, rails, spines, switch_guid) and the nodes of the fabric in name order, and answers the
 * SMPs a directed route brings to one.  Node p sits in scalable unit p / su_size at slot p % su_size; HCA
 * mlx5_<rail> is cabled to port slot + 1 of leaf (unit, rail); leaf ports su_size + 1 + k go up to spine k;
 * spine port l + 1 goes down to leaf l = unit * rails + rail.  Switch n (spines first, then leaves) has LID
 * 2 + n and node GUID switch_guid + 1 + n. */
#include "responder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_SWITCH_LID 2
#define MAX_SWITCH_LID 0xFF /* the HCAs' LIDs start at 0x100 */
#define NODE_TYPE_SWITCH 2
#define SWITCH_DEVICE_ID 0xD2F2 /* NVIDIA Quantum-2 QM9700 */
#define SWITCH_REVISION 0xA0
#define SWITCH_PARTITION_CAP 8
#define SWITCH_CAP_MASK 0x00004000u /* IsExtendedSpeedsSupported */
#define DOWN 1
#define PHYS_POLLING 2
#define PHYS_LINK_UP 5

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct member *)a)->name, ((const struct member *)b)->name);
}

size_t fabric_members(const struct peer *peers, size_t count, struct member *out, size_t cap)
{
    const struct node *node = current_node();
    size_t n = 0;
    out[n++] = (struct member){node->name, node->ports, node->nports};
    for (size_t i = 0; i < count && n < cap; i++)
        out[n++] = (struct member){peers[i].name, peers[i].ports, peers[i].nports};
    qsort(out, n, sizeof *out, by_name);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        if (distinct == 0 || strcmp(out[i].name, out[distinct - 1].name) != 0)
            out[distinct++] = out[i];
    return distinct;
}

/* Scalable units the switches can have: their LIDs stay below the HCAs', and each leaf has a spine port. */
static uint32_t max_units(const struct node *node)
{
    if (node->rails == 0 || node->su_size == 0)
        return 0;
    uint32_t by_lid = (MAX_SWITCH_LID - FIRST_SWITCH_LID + 1) > node->spines
                          ? (MAX_SWITCH_LID - FIRST_SWITCH_LID + 1 - node->spines) / node->rails
                          : 0;
    uint32_t by_ports = SWITCH_PORTS / node->rails;
    return by_lid < by_ports ? by_lid : by_ports;
}

static uint32_t units(const struct node *node, size_t nmembers)
{
    uint32_t wanted = node->su_size ? (uint32_t)((nmembers + node->su_size - 1) / node->su_size) : 0;
    uint32_t most = max_units(node);
    return wanted < most ? wanted : most;
}

uint32_t switch_count(size_t nmembers)
{
    const struct node *node = current_node();
    uint32_t u = units(node, nmembers);
    return u ? node->spines + u * node->rails : 0;
}

uint16_t switch_lid(uint32_t sw) { return (uint16_t)(FIRST_SWITCH_LID + sw); }

bool switch_by_lid(uint16_t lid, size_t nmembers, uint32_t *sw)
{
    if (lid < FIRST_SWITCH_LID || (uint32_t)(lid - FIRST_SWITCH_LID) >= switch_count(nmembers))
        return false;
    *sw = lid - FIRST_SWITCH_LID;
    return true;
}

static bool up(const struct port *p) { return p->state == PORT_UP; }

bool fabric_hop(const struct place *here, unsigned out_port, const struct member *m, size_t nmembers,
                struct place *next)
{
    const struct node *node = current_node();
    uint32_t nunits = units(node, nmembers), spines = node->spines, rails = node->rails, su_size = node->su_size;
    if (here->kind == AT_CA) {
        if (out_port != 1 || !up(here->ca) || here->ca->index >= rails)
            return false;
        size_t position = nmembers;
        for (size_t i = 0; i < nmembers; i++)
            if (strcmp(m[i].name, here->ca->node_name) == 0)
                position = i;
        if (position == nmembers || position / su_size >= nunits)
            return false;
        *next = (struct place){.kind = AT_SWITCH,
                               .sw = spines + (uint32_t)(position / su_size) * rails + here->ca->index,
                               .entry = (uint8_t)(position % su_size + 1)};
        return true;
    }
    if (here->sw < spines) { /* a spine: port l + 1 down to leaf l */
        uint32_t leaf = out_port - 1;
        if (out_port == 0 || leaf / rails >= nunits)
            return false;
        *next = (struct place){.kind = AT_SWITCH, .sw = spines + leaf, .entry = (uint8_t)(su_size + here->sw + 1)};
        return true;
    }
    uint32_t leaf = here->sw - spines, unit = leaf / rails, rail = leaf % rails;
    if (out_port > su_size && out_port <= su_size + spines) { /* up to spine out_port - su_size - 1 */
        *next = (struct place){.kind = AT_SWITCH, .sw = out_port - su_size - 1, .entry = (uint8_t)(leaf + 1)};
        return true;
    }
    size_t position = (size_t)unit * su_size + out_port - 1;
    if (out_port == 0 || out_port > su_size || position >= nmembers)
        return false;
    for (size_t i = 0; i < m[position].nports; i++)
        if (m[position].ports[i].index == rail && up(&m[position].ports[i])) {
            *next = (struct place){.kind = AT_CA, .ca = &m[position].ports[i], .entry = 1};
            return true;
        }
    return false;
}

static uint64_t switch_guid(uint32_t sw) { return current_node()->switch_guid + 1 + sw; }

void switch_desc(uint32_t sw, char *out, size_t cap)
{
    const struct node *node = current_node();
    if (sw < node->spines) {
        snprintf(out, cap, "MF0;spine-%02u:MQM9700/U1", sw + 1);
    } else {
        uint32_t leaf = sw - node->spines;
        snprintf(out, cap, "MF0;su%02u-leaf-r%u:MQM9700/U1", leaf / node->rails + 1, leaf % node->rails);
    }
}

void switch_node_info(uint32_t sw, uint8_t entry, uint8_t d[40])
{
    memset(d, 0, 40);
    d[0] = 1, d[1] = 1, d[2] = NODE_TYPE_SWITCH, d[3] = SWITCH_PORTS;
    put_be(d + 4, 8, switch_guid(sw)); /* system image GUID */
    put_be(d + 12, 8, switch_guid(sw));
    put_be(d + 20, 8, switch_guid(sw)); /* port GUID: port 0's */
    put_be(d + 28, 2, SWITCH_PARTITION_CAP);
    put_be(d + 30, 2, SWITCH_DEVICE_ID);
    put_be(d + 32, 4, SWITCH_REVISION);
    d[36] = entry;
    put_be(d + 37, 3, 0x02c9);
}

/* SwitchInfo (IBA 14.2.5.4): linear forwarding up to the highest LID, enhanced port 0. */
void switch_info(uint8_t d[64])
{
    memset(d, 0, 64);
    put_be(d + 0, 2, 0xC000);   /* LinearFDBCap */
    put_be(d + 4, 2, 0x1000);   /* MulticastFDBCap */
    put_be(d + 6, 2, 0xBFFF);   /* LinearFDBTop */
    d[8] = 0xFF;                /* DefaultPort: none */
    d[9] = 0xFF, d[10] = 0xFF;  /* default multicast ports */
    d[11] = 18 << 3;            /* LifeTimeValue */
    put_be(d + 12, 2, 1);       /* LIDsPerPort */
    put_be(d + 14, 2, SWITCH_PARTITION_CAP);
    d[16] = 0x08;               /* EnhancedPort0 */
}

/* PortInfo of switch port n (0: the switch's own port, which holds its LID), asked through port entry. */
bool switch_port_info(uint32_t sw, uint8_t entry, unsigned n, const struct member *m, size_t nmembers, uint64_t gid_prefix,
                      uint8_t d[64])
{
    if (n > SWITCH_PORTS)
        return false;
    const struct node *node = current_node();
    struct place here = {.kind = AT_SWITCH, .sw = sw}, there;
    bool link = n == 0 || fabric_hop(&here, n, m, nmembers, &there);
    /* a cable to a CA runs at the CA's rate; between switches, at the rate of this node's HCAs */
    const struct port *rate = n != 0 && link && there.kind == AT_CA ? there.ca : node->nports ? &node->ports[0] : NULL;
    uint8_t width = rate ? rate->width_active : 2, speed = rate ? rate->speed_active : 1;
    uint8_t speed_ext = rate ? rate->speed_ext_active : 8;
    memset(d, 0, 64);
    put_be(d + 8, 8, gid_prefix);
    put_be(d + 16, 2, switch_lid(sw));
    put_be(d + 18, 2, node->sm_lid);
    put_be(d + 20, 4, SWITCH_CAP_MASK);
    d[28] = entry; /* LocalPortNum: the port the SMP came in by */
    d[29] = 0x03, d[30] = 0x03;
    d[31] = link ? width : 0;
    d[32] = (uint8_t)(0x7 << 4 | (link ? PORT_UP : DOWN));
    d[33] = (uint8_t)((link ? PHYS_LINK_UP : PHYS_POLLING) << 4 | 0x2);
    d[35] = (uint8_t)((link ? speed & 0xF : 0) << 4 | 0x7);
    d[36] = 5 << 4;
    d[37] = 4 << 4;
    d[41] = 5;
    d[43] = 4 << 4;
    d[51] = 18;
    d[62] = (uint8_t)((link ? speed_ext & 0xF : 0) << 4 | 0xF);
    d[63] = 0x1F;
    return true;
}

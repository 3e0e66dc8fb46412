/* visible.c: the GPUs this process may see. The real library enumerates the GPUs whose device node the
 * process can see: a container given two of a node's eight GPUs has /dev/nvidiactl and those two
 * /dev/nvidia<minor>, and NVML lists two, indexed 0 and 1 in the node's order, each keeping its minor
 * number and identity. With no /dev/nvidiactl at all (a process that was given no device nodes, the unit
 * tests) every GPU of the state file is listed. Applied to each freshly parsed snapshot (state.c);
 * mokka.h only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "visible.h"

static int node_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* a peer list (topology levels or NVLink counts) indexed by node index, reindexed by visible index; a
 * list the file left empty stays empty (every peer then has the default) */
static void reindex_peers(uint8_t *list, uint32_t *n, const uint32_t *from, uint32_t count, uint8_t absent) {
    if (*n == 0) return;
    uint8_t out[MK_MAX_DEVICES];
    for (uint32_t j = 0; j < count; j++) out[j] = from[j] < *n ? list[from[j]] : absent;
    memcpy(list, out, count);
    *n = count;
}

int mk_visible_select(struct mk_snap *s) {
    if (!node_exists("/dev/nvidiactl")) return 0;
    uint32_t from[MK_MAX_DEVICES], to[MK_MAX_DEVICES], count = 0;
    for (uint32_t i = 0; i < s->ndev; i++) {
        char path[32];
        snprintf(path, sizeof path, "/dev/nvidia%u", s->dev[i].minor_number);
        to[i] = UINT32_MAX;
        if (node_exists(path)) {
            to[i] = count;
            from[count++] = i;
        }
    }
    if (count == s->ndev) return 0;
    struct mk_device *dev = calloc(s->dev_cap ? s->dev_cap : 1, sizeof *dev);
    if (dev == NULL) return -1;
    for (uint32_t i = 0; i < s->ndev; i++)
        if (to[i] == UINT32_MAX) free(s->dev[i].proc);
    for (uint32_t j = 0; j < count; j++) {
        dev[j] = s->dev[from[j]];
        reindex_peers(dev[j].topo_level, &dev[j].topo_level_n, from, count, NVML_TOPOLOGY_SINGLE);
        reindex_peers(dev[j].topo_nvlink, &dev[j].topo_nvlink_n, from, count, 0);
    }
    free(s->dev);
    s->dev = dev;
    s->ndev = s->declared_count = count;
    uint32_t kept = 0;
    for (uint32_t e = 0; e < s->nevent; e++) {
        struct mk_event ev = s->events[e];
        if (to[ev.device] == UINT32_MAX) continue;
        ev.device = to[ev.device];
        s->events[kept++] = ev;
    }
    s->nevent = kept;
    return 0;
}

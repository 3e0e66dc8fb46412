/* NVLink, topology/affinity, field values. */
#include <stdio.h>
#include <string.h>

#include "dynamic.h"
#include "util.h"

static nvmlReturn_t link_of(const struct mk_device *d, unsigned link, const struct mk_link **out) {
    if (link >= MK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= d->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
    *out = &d->link[link];
    return NVML_SUCCESS;
}

#define LINK(d, l)                                                  \
    const struct mk_link *L;                                        \
    do { nvmlReturn_t r_ = link_of((d), (l), &L);                   \
         if (r_ != NVML_SUCCESS) return r_; } while (0)

MK_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
    DEV(device);
    NONNULL(isActive);
    LINK(D, link);
    *isActive = L->state ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

static unsigned link_version(const struct mk_device *d, const struct mk_link *l) {
    return l->version ? l->version : d->nvlink_version;
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version) {
    DEV(device);
    NONNULL(version);
    LINK(D, link);
    *version = link_version(D, L);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, nvmlNvLinkCapability_t cap,
                                                 unsigned int *capResult) {
    DEV(device);
    NONNULL(capResult);
    LINK(D, link);
    if ((unsigned)cap >= NVML_NVLINK_CAP_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned v = 0;
    if (L->state) {
        switch (cap) {
        case NVML_NVLINK_CAP_P2P_SUPPORTED:
        case NVML_NVLINK_CAP_P2P_ATOMICS:
            v = L->remote_type == NVML_NVLINK_DEVICE_TYPE_GPU || L->remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH;
            break;
        case NVML_NVLINK_CAP_SYSMEM_ACCESS:
        case NVML_NVLINK_CAP_SYSMEM_ATOMICS:
        case NVML_NVLINK_CAP_VALID: v = 1; break;
        case NVML_NVLINK_CAP_SLI_BRIDGE: v = 0; break;
        default: break;
        }
    }
    *capResult = v;
    return NVML_SUCCESS;
}

static void remote_pci(const struct mk_link *l, nvmlPciInfo_t *p, size_t upto) {
    struct mk_device tmp;
    memset(&tmp, 0, sizeof tmp);
    unsigned dom = 0xFFFFFFFFu, bus = 0xFF, dev = 0xFF, fn = 0;
    char tail;
    if (l->remote_bus_id[0])
        if (sscanf(l->remote_bus_id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
            dom = 0xFFFFFFFFu; bus = dev = 0xFF; fn = 0;
        }
    tmp.pci_domain = dom; tmp.pci_bus = bus; tmp.pci_dev = dev; tmp.pci_func = fn;
    tmp.pci_device_id = l->remote_device_id;
    mk_pci_fill(&tmp, p, upto);
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    DEV(device);
    NONNULL(pci);
    LINK(D, link);
    if (!L->state) NOTSUP();
    remote_pci(L, pci, sizeof *pci);
    return NVML_SUCCESS;
}
MK_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    DEV(device);
    NONNULL(pci);
    LINK(D, link);
    if (!L->state) NOTSUP();
    remote_pci(L, pci, offsetof(nvmlPciInfo_t, busId));
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *t) {
    DEV(device);
    NONNULL(t);
    LINK(D, link);
    *t = L->state ? (nvmlIntNvLinkDeviceType_t)L->remote_type : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    return NVML_SUCCESS;
}

/* Injected errors on a link: those accrued before the epoch plus rate x time since, on links
 * with errors.inject. Wall-clock based, so every process sees the same, growing count. */
static uint64_t injected(const struct mk_device *d, const struct mk_link *l) {
    uint64_t n = l->err_injected;
    if (l->err_inject && d->nvlink_err_rate_milli) {
        uint64_t now = mk_now_us() / 1000;
        if (now > d->nvlink_err_epoch_ms) {
            unsigned __int128 x = (unsigned __int128)d->nvlink_err_rate_milli * (now - d->nvlink_err_epoch_ms);
            x /= 1000000u; /* milli-errors/s x ms */
            n += x > UINT64_MAX - n ? UINT64_MAX - n : (uint64_t)x;
        }
    }
    return n;
}

/* Each injected error is a CRC-failed flit that the data link layer replays. */
static uint64_t link_error(const struct mk_device *d, const struct mk_link *l, nvmlNvLinkErrorCounter_t c) {
    switch (c) {
    case NVML_NVLINK_ERROR_DL_REPLAY: return l->err_replay + injected(d, l);
    case NVML_NVLINK_ERROR_DL_RECOVERY: return l->err_recovery;
    case NVML_NVLINK_ERROR_DL_CRC_FLIT: return l->err_crc_flit + injected(d, l);
    case NVML_NVLINK_ERROR_DL_CRC_DATA: return l->err_crc_data;
    default: return l->err_ecc;
    }
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, nvmlNvLinkErrorCounter_t c,
                                                   unsigned long long *v) {
    DEV(device);
    NONNULL(v);
    LINK(D, link);
    if ((unsigned)c > NVML_NVLINK_ERROR_DL_ECC_DATA) return NVML_ERROR_INVALID_ARGUMENT;
    *v = link_error(D, L, c);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceResetNvLinkErrorCounters(nvmlDevice_t device, unsigned int link) {
    DEV(device);
    LINK(D, link);
    return NVML_ERROR_NO_PERMISSION;
}

MK_API nvmlReturn_t nvmlDeviceGetNvLinkUtilizationCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                                         unsigned long long *rx, unsigned long long *tx) {
    DEV(device);
    NONNULL(rx);
    NONNULL(tx);
    LINK(D, link);
    if (counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *rx = L->rx_bytes / 1024;
    *tx = L->tx_bytes / 1024;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ topology */

MK_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                       nvmlGpuTopologyLevel_t *pathInfo) {
    /* the PCI path read at attach: a GPU lost since still answers (util.h, mk_g_attached) */
    struct mk_snap *S; struct mk_device *D;
    nvmlReturn_t r = mk_dev_attached(device1, &S, &D);
    if (r != NVML_SUCCESS) return r;
    if (!mk_handle_valid(device2)) return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = mk_dev_attached(device2, &S, &D)) != NVML_SUCCESS) return r;
    NONNULL(pathInfo);
    *pathInfo = (nvmlGpuTopologyLevel_t)mk_topo_level(S, device1->index, device2->index);
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level, unsigned int *count,
                                                    nvmlDevice_t *deviceArray) {
    DEV(device);
    NONNULL(count);
    if ((unsigned)level > NVML_TOPOLOGY_SYSTEM) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (uint32_t j = 0; j < S->ndev; j++) {
        if (j == device->index || S->dev[j].lost > 0) continue;
        if (mk_topo_level(S, device->index, j) <= (unsigned)level) {
            if (deviceArray && n < *count) deviceArray[n] = mk_handle(j);
            n++;
        }
    }
    if (deviceArray == NULL || *count == 0) { *count = n; return NVML_SUCCESS; }
    if (*count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    *count = n;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t idx,
                                          nvmlGpuP2PStatus_t *status) {
    DEV2(device1, device2);
    NONNULL(status);
    uint32_t a = device1->index, b = device2->index;
    if (a == b) { *status = NVML_P2P_STATUS_OK; return NVML_SUCCESS; }
    if (idx == NVML_P2P_CAPS_INDEX_NVLINK) {
        *status = mk_topo_nvlinks(S, a, b) ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        return NVML_SUCCESS;
    }
    if (idx == NVML_P2P_CAPS_INDEX_PROP) { *status = NVML_P2P_STATUS_NOT_SUPPORTED; return NVML_SUCCESS; }
    if (mk_topo_nvlinks(S, a, b) || mk_topo_level(S, a, b) <= NVML_TOPOLOGY_HOSTBRIDGE) *status = NVML_P2P_STATUS_OK;
    else *status = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED;
    return NVML_SUCCESS;
}

static nvmlReturn_t cpuset_out(const struct mk_device *d, unsigned int n, unsigned long *set) {
    if (!d->cpuset_set) NOTSUP();
    if (n == 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < n; i++) set[i] = i < MK_CPUSET_WORDS ? (unsigned long)d->cpuset[i] : 0;
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet) {
    DEV(device);
    NONNULL(cpuSet);
    return cpuset_out(D, cpuSetSize, cpuSet);
}

MK_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet,
                                                       nvmlAffinityScope_t scope) {
    DEV(device);
    NONNULL(cpuSet);
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET) return NVML_ERROR_INVALID_ARGUMENT;
    return cpuset_out(D, cpuSetSize, cpuSet);
}

MK_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize, unsigned long *nodeSet,
                                               nvmlAffinityScope_t scope) {
    DEV(device);
    NONNULL(nodeSet);
    if (D->numa_node < 0) NOTSUP();
    if (nodeSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < nodeSetSize; i++) nodeSet[i] = 0;
    unsigned bits = 8 * sizeof(unsigned long);
    if ((unsigned)D->numa_node / bits < nodeSetSize) nodeSet[(unsigned)D->numa_node / bits] = 1ul << (D->numa_node % bits);
    return NVML_SUCCESS;
}

/* The GPU's own NUMA node: only where GPU memory is a NUMA node (coherent Grace C2C systems);
 * x86 boards answer NOT_SUPPORTED (topo -m "GPU NUMA ID" N/A). */
MK_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    DEV(device);
    NONNULL(node);
    if (D->gpu_numa_node < 0) NOTSUP();
    *node = (unsigned)D->gpu_numa_node;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------- field values */

static unsigned active_links(const struct mk_device *d) {
    unsigned n = 0;
    for (unsigned l = 0; l < d->nvlink_count; l++) n += d->link[l].state != 0;
    return n;
}

/* per-link error counter fields: id ranges for L0..L5 + TOTAL and L6..L11 */
static int link_err_field(unsigned id, int *kind, int *link) {
    static const struct { unsigned lo0, lo6; int kind; } t[] = {
        {NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6, 0},
        {NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6, 1},
        {NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6, 2},
        {NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6, 3},
        {NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L0, NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_L6, 4},
    };
    for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].kind == 4) {
            if (id >= t[i].lo0 && id <= t[i].lo0 + 11) { *kind = 4; *link = (int)(id - t[i].lo0); return 1; }
            if (id == NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL) { *kind = 4; *link = -1; return 1; }
            continue;
        }
        if (id >= t[i].lo0 && id <= t[i].lo0 + 6) { *kind = t[i].kind; *link = id == t[i].lo0 + 6 ? -1 : (int)(id - t[i].lo0); return 1; }
        if (id >= t[i].lo6 && id <= t[i].lo6 + 5) { *kind = t[i].kind; *link = 6 + (int)(id - t[i].lo6); return 1; }
    }
    return 0;
}

static uint64_t link_err(const struct mk_device *d, const struct mk_link *l, int kind) {
    static const nvmlNvLinkErrorCounter_t by_kind[] = {NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA,
                                                       NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY,
                                                       NVML_NVLINK_ERROR_DL_ECC_DATA};
    return link_error(d, l, by_kind[kind]);
}

static int speed_field_link(unsigned id) {
    if (id >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 && id <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L5)
        return (int)(id - NVML_FI_DEV_NVLINK_SPEED_MBPS_L0);
    if (id >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L6 && id <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L11)
        return 6 + (int)(id - NVML_FI_DEV_NVLINK_SPEED_MBPS_L6);
    return -1;
}

#define UI(x) do { v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT; v->value.uiVal = (unsigned)(x); } while (0)
#define ULL(x) do { v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG; v->value.ullVal = (unsigned long long)(x); } while (0)
#define SI(x) do { v->valueType = NVML_VALUE_TYPE_SIGNED_INT; v->value.siVal = (int)(x); } while (0)

static nvmlReturn_t field(const struct mk_snap *S, const struct mk_device *D, nvmlFieldValue_t *v) {
    unsigned id = v->fieldId;
    int kind, link;
    const int ecc_ok = D->ecc_supported > 0 && D->ecc_current;
    if (id >= NVML_FI_DEV_ECC_SBE_VOL_TOTAL && id <= NVML_FI_DEV_ECC_DBE_AGG_CBU) {
        if (!ecc_ok) return NVML_ERROR_NOT_SUPPORTED;
        static const signed char map[][3] = {
            /* id-3: {volatile?0:1, sbe?0:1, loc or -1 total} */
            {0, 0, -1}, {0, 1, -1}, {1, 0, -1}, {1, 1, -1},
            {0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}, {0, 0, 2}, {0, 1, 2}, {0, 0, 3}, {0, 1, 3},
            {0, 0, 4}, {0, 1, 4}, {0, 1, 5},
            {1, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 1, 1}, {1, 0, 2}, {1, 1, 2}, {1, 0, 3}, {1, 1, 3},
            {1, 0, 4}, {1, 1, 4}, {1, 1, 5},
        };
        const signed char *m = map[id - NVML_FI_DEV_ECC_SBE_VOL_TOTAL];
        uint64_t x = 0;
        if (m[2] < 0) for (int l = 0; l < 7; l++) x += D->ecc[m[0]][m[1]][l];
        else x = D->ecc[m[0]][m[1]][m[2]];
        ULL(x);
        return NVML_SUCCESS;
    }
    if (link_err_field(id, &kind, &link)) {
        if (!D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        uint64_t x = 0;
        if (link < 0) for (unsigned l = 0; l < D->nvlink_count; l++) x += link_err(D, &D->link[l], kind);
        else if ((unsigned)link < D->nvlink_count) x = link_err(D, &D->link[link], kind);
        else return NVML_ERROR_NOT_SUPPORTED;
        ULL(x);
        return NVML_SUCCESS;
    }
    if ((link = speed_field_link(id)) >= 0) {
        if ((unsigned)link >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->link[link].state ? D->nvlink_speed_mbps : 0);
        return NVML_SUCCESS;
    }
    switch (id) {
    case NVML_FI_DEV_ECC_CURRENT:
        if (D->ecc_supported <= 0) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->ecc_current); return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_PENDING:
        if (D->ecc_supported <= 0) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->ecc_pending); return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_SBE:
        if (!D->retired_supported) return NVML_ERROR_NOT_SUPPORTED;
        ULL(D->retired_sbe); return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_DBE:
        if (!D->retired_supported) return NVML_ERROR_NOT_SUPPORTED;
        ULL(D->retired_dbe); return NVML_SUCCESS;
    case NVML_FI_DEV_RETIRED_PENDING:
    case NVML_FI_DEV_RETIRED_PENDING_SBE:
    case NVML_FI_DEV_RETIRED_PENDING_DBE:
        if (!D->retired_supported) return NVML_ERROR_NOT_SUPPORTED;
        ULL(D->retired_pending); return NVML_SUCCESS;
    case NVML_FI_DEV_PERF_POLICY_POWER: ULL(D->viol_power_ns); return NVML_SUCCESS;
    case NVML_FI_DEV_PERF_POLICY_THERMAL: ULL(D->viol_thermal_ns); return NVML_SUCCESS;
    case NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: ULL(D->viol_sync_boost_ns); return NVML_SUCCESS;
    case NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT:
    case NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION:
    case NVML_FI_DEV_PERF_POLICY_RELIABILITY:
    case NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS: ULL(0); return NVML_SUCCESS;
    case NVML_FI_DEV_MEMORY_TEMP:
        if (!D->temp_memory) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->temp_memory); return NVML_SUCCESS;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
    case NVML_FI_DEV_ENERGY:
        if (!D->power_supported) return NVML_ERROR_NOT_SUPPORTED;
        ULL(D->energy_mj); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: {
        if (!active_links(D)) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->nvlink_speed_mbps); return NVML_SUCCESS;
    }
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        if (!D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->nvlink_count); return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER: ULL(D->pcie_replay); return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: ULL(0); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: {
        if (!D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        int tx = id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX || id == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
        uint64_t x = 0;
        if (v->scopeId < D->nvlink_count) x = tx ? D->link[v->scopeId].tx_bytes : D->link[v->scopeId].rx_bytes;
        else if (v->scopeId == UINT32_MAX)
            for (unsigned l = 0; l < D->nvlink_count; l++) x += tx ? D->link[l].tx_bytes : D->link[l].rx_bytes;
        else return NVML_ERROR_INVALID_ARGUMENT;
        ULL(x / 1024); return NVML_SUCCESS; /* KiB */
    }
    case NVML_FI_DEV_REMAPPED_COR:
        if (!D->remap_supported) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->remap_cor); return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_UNC:
        if (!D->remap_supported) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->remap_unc); return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_PENDING:
        if (!D->remap_supported) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->remap_pending); return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_FAILURE:
        if (!D->remap_supported) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->remap_failure); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(v->scopeId); return NVML_SUCCESS;
    case NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT:
        if (!D->nvswitch_links) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->nvswitch_links); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY:
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC: {
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        const struct mk_link *l = &D->link[v->scopeId];
        ULL(link_error(D, l, id == NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY ? NVML_NVLINK_ERROR_DL_REPLAY
                               : id == NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY ? NVML_NVLINK_ERROR_DL_RECOVERY
                                                                            : NVML_NVLINK_ERROR_DL_CRC_FLIT));
        return NVML_SUCCESS;
    }
    case NVML_FI_DEV_NVLINK_GET_SPEED:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->link[v->scopeId].state ? D->nvlink_speed_mbps : 0); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_STATE:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->link[v->scopeId].state ? 1 : 0); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_VERSION:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(link_version(D, &D->link[v->scopeId])); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_POWER_STATE:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(0); return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_GET_POWER_THRESHOLD:
        if (v->scopeId >= D->nvlink_count) return NVML_ERROR_NOT_SUPPORTED;
        UI(1000); return NVML_SUCCESS;
    case NVML_FI_DEV_C2C_LINK_COUNT:
        if (!D->c2c_supported) return NVML_ERROR_NOT_SUPPORTED;
        UI(D->c2c_enabled ? 10 : 0); return NVML_SUCCESS;
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT:
        if (!D->power_supported || v->scopeId != 0) return NVML_ERROR_NOT_SUPPORTED;
        UI(mk_power_usage(D)); return NVML_SUCCESS;
    case NVML_FI_DEV_POWER_MIN_LIMIT:
    case NVML_FI_DEV_POWER_MAX_LIMIT:
    case NVML_FI_DEV_POWER_DEFAULT_LIMIT:
    case NVML_FI_DEV_POWER_CURRENT_LIMIT:
    case NVML_FI_DEV_POWER_REQUESTED_LIMIT: {
        if (!D->power_supported) return NVML_ERROR_NOT_SUPPORTED;
        unsigned gpu, module;
        if (id == NVML_FI_DEV_POWER_MIN_LIMIT) gpu = D->power_min, module = D->power_module_min;
        else if (id == NVML_FI_DEV_POWER_MAX_LIMIT) gpu = D->power_max, module = D->power_module_max;
        else if (id == NVML_FI_DEV_POWER_DEFAULT_LIMIT) gpu = D->power_default, module = D->power_module_default;
        else gpu = D->power_enforced, module = D->power_module_limit;
        if (v->scopeId == NVML_POWER_SCOPE_GPU) { UI(gpu); return NVML_SUCCESS; }
        if (v->scopeId == NVML_POWER_SCOPE_MODULE && module) { UI(module); return NVML_SUCCESS; }
        return NVML_ERROR_NOT_SUPPORTED;
    }
    case NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT:
    case NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT:
    case NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT:
    case NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: {
        if (!D->temp_tlimit || !D->temp_gpu) return NVML_ERROR_NOT_SUPPORTED;
        int x;
        if (id == NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT) x = D->temp_tlimit_shutdown;
        else if (id == NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT) x = D->temp_tlimit_slowdown;
        else if (id == NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT && D->temp_gpu_max) x = D->temp_tlimit_gpu_max;
        else if (id == NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT && D->temp_mem_max) x = D->temp_tlimit_mem_max;
        else return NVML_ERROR_NOT_SUPPORTED;
        SI(x); return NVML_SUCCESS;
    }
    case NVML_FI_DEV_IS_RESETLESS_MIG_SUPPORTED:
        UI(0); return NVML_SUCCESS;
    case NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE:
        UI(D->mig_current >= 0); return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

MK_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEV(device);
    NONNULL(values);
    if (valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
    long long ts = (long long)mk_now_us();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = ts;
        v->latencyUsec = 0;
        v->nvmlReturn = field(S, D, v);
    }
    return NVML_SUCCESS;
}

MK_API nvmlReturn_t nvmlDeviceClearFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEV(device);
    NONNULL(values);
    return NVML_ERROR_NO_PERMISSION;
}

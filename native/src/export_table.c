/* nvidia-smi's private export table: nvmlInternalGetExportTable and the slots it answers. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dynamic.h"
#include "setters.h"
#include "util.h"

/* A PCI function of the node, for slot 23: a GPU (index) or another function (HCA, NVSwitch). */
struct pci_end {
    int gpu;                  /* GPU index, or -1 */
    int32_t root_complex, pcie_switch, numa_node;
};

static int find_end(const struct mk_snap *s, const char *bus, struct pci_end *e) {
    for (uint32_t i = 0; i < s->ndev; i++)
        if (mk_bus_match(bus, &s->dev[i])) {
            e->gpu = (int)i;
            e->root_complex = s->dev[i].root_complex;
            e->pcie_switch = s->dev[i].pcie_switch;
            e->numa_node = s->dev[i].numa_node;
            return 1;
        }
    for (uint32_t i = 0; i < s->npcifn; i++)
        if (mk_bus_match_fn(bus, s->pcifn[i].pci_domain, s->pcifn[i].pci_bus, s->pcifn[i].pci_dev,
                             s->pcifn[i].pci_func)) {
            e->gpu = -1;
            e->root_complex = s->pcifn[i].root_complex;
            e->pcie_switch = s->pcifn[i].pcie_switch;
            e->numa_node = s->pcifn[i].numa_node;
            return 1;
        }
    return 0;
}

/* slot 23: link type between two PCI functions by bus id, for `topo -m` (GPU rows and NIC rows);
 * 0 PIX 1 PXB 2 PHB 3 NODE 4 SYS, 5+k NV(k+1). GPU<->GPU: NVLinks, else topology.levels. Any pair
 * with a non-GPU function: behind the same PCIe switch PXB (a GPU and its NIC share a multi-level
 * switch on DGX/HGX baseboards, where topo -m prints PXB), else same root complex PHB, same NUMA
 * node NODE, else SYS. */
static int slot23_link_type(const char *a, const char *b, int *out) {
    if (!a || !b || !out) return NVML_ERROR_INVALID_ARGUMENT;
    struct mk_snap *s = mk_snapshot();
    if (!s) return NVML_ERROR_UNINITIALIZED;
    struct pci_end ea, eb;
    if (!find_end(s, a, &ea) || !find_end(s, b, &eb)) {
        mk_debug("slot23(%s, %s) -> NOT_FOUND", a, b);
        return NVML_ERROR_NOT_FOUND;
    }
    if (ea.gpu >= 0 && eb.gpu >= 0) {
        unsigned nv = mk_topo_nvlinks(s, (uint32_t)ea.gpu, (uint32_t)eb.gpu);
        if (nv) { *out = 4 + (int)nv; return NVML_SUCCESS; }
        switch (mk_topo_level(s, (uint32_t)ea.gpu, (uint32_t)eb.gpu)) {
        case NVML_TOPOLOGY_INTERNAL:
        case NVML_TOPOLOGY_SINGLE: *out = 0; break;
        case NVML_TOPOLOGY_MULTIPLE: *out = 1; break;
        case NVML_TOPOLOGY_HOSTBRIDGE: *out = 2; break;
        case NVML_TOPOLOGY_NODE: *out = 3; break;
        default: *out = 4; break;
        }
        return NVML_SUCCESS;
    }
    if (ea.pcie_switch >= 0 && ea.pcie_switch == eb.pcie_switch) *out = 1;
    else if (ea.root_complex >= 0 && ea.root_complex == eb.root_complex) *out = 2;
    else if (ea.numa_node >= 0 && ea.numa_node == eb.numa_node) *out = 3;
    else *out = 4;
    return NVML_SUCCESS;
}

/* slot 81: f(index, char *buf, size): the PCI bus id of GPU `index` in the legacy form
 * (DDDD:BB:DD.F, upper case), known even when the GPU is lost: nvidia-smi names the GPU with it in
 * "Unable to determine the device handle for GPU0000:61:00.0: GPU is lost." */
static int slot81(uintptr_t index, char *buf, unsigned size) {
    struct mk_snap *s = mk_snapshot();
    if (!s) return NVML_ERROR_UNINITIALIZED;
    if (!buf || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= s->ndev || !s->dev[index].bus_id[0]) return NVML_ERROR_INVALID_ARGUMENT;
    const struct mk_device *d = &s->dev[index];
    if ((unsigned)snprintf(buf, size, "%04X:%02X:%02X.%X", d->pci_domain & 0xFFFF, d->pci_bus, d->pci_dev,
                           d->pci_func) >= size)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

/* slots 213/214/215: compute / MPS compute / graphics process lists for the default view and -q.
 * f(device, unsigned *count (in: capacity), entries, unused); entry stride 4128:
 * pid u32 @0, usedGpuMemory u64 @8, gpuInstanceId u32 @16, computeInstanceId u32 @20,
 * ccProtectedMemory u64 @24, NUL-terminated name @32 (4096 bytes). */
#define PROC_ENTRY_STRIDE 4128
#define PROC_NAME_OFF 32
static int slot_procs(nvmlDevice_t device, unsigned *count, unsigned char *buf, unsigned kind) {
    DEV(device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (unsigned p = 0; p < D->nproc; p++) n += D->proc[p].pid && D->proc[p].type == kind;
    if (n == 0) { *count = 0; return NVML_SUCCESS; }
    if (!buf || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    unsigned k = 0;
    for (unsigned p = 0; p < D->nproc; p++) {
        const struct mk_proc *pr = &D->proc[p];
        if (!pr->pid || pr->type != kind) continue;
        unsigned char *e = buf + (size_t)k++ * PROC_ENTRY_STRIDE;
        uint32_t u32;
        uint64_t u64;
        memset(e, 0, PROC_NAME_OFF + sizeof pr->name);
        u32 = pr->pid; memcpy(e, &u32, 4);
        u64 = pr->used_bytes; memcpy(e + 8, &u64, 8);
        u32 = 0xFFFFFFFFu; memcpy(e + 16, &u32, 4); memcpy(e + 20, &u32, 4);
        memcpy(e + PROC_NAME_OFF, pr->name, strlen(pr->name));
    }
    *count = n;
    return NVML_SUCCESS;
}
static int slot213(nvmlDevice_t d, unsigned *c, unsigned char *b, void *x) { return slot_procs(d, c, b, 0); }
static int slot214(nvmlDevice_t d, unsigned *c, unsigned char *b, void *x) { return slot_procs(d, c, b, 2); }
static int slot215(nvmlDevice_t d, unsigned *c, unsigned char *b, void *x) { return slot_procs(d, c, b, 1); }

/* slot 230: "Host Max" PCIe generation: f(device, unsigned *out, 1, ...) */
static int slot230(nvmlDevice_t device, unsigned *out) {
    DEV(device);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->pcie_host_max_gen) return NVML_ERROR_NOT_SUPPORTED;
    *out = D->pcie_host_max_gen;
    return NVML_SUCCESS;
}

/* slot 240: "GPU T.Limit Temp", GetMarginTemperature's (degrees C below the slowdown limit) on T.Limit boards
 * (Ada and newer): f(device, int *out, 1, ...). NOT_SUPPORTED makes nvidia-smi print absolute thresholds. */
static int slot240(nvmlDevice_t device, int *out) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlMarginTemperature_t margin = {.version = nvmlMarginTemperature_v1};
    nvmlReturn_t r = nvmlDeviceGetMarginTemperature(device, &margin);
    if (r == NVML_SUCCESS) *out = margin.marginTemperature;
    return r;
}

/* slot 72: per-device capability check before `nvidia-smi dmon` / `pmon` sample a GPU:
 * f(device, unsigned *supported, ...); 1 lets them run (NOT_SUPPORTED: "Not supported on the device(s)"). */
static int slot72(nvmlDevice_t device, unsigned *supported) {
    DEV(device);
    if (!supported) return NVML_ERROR_INVALID_ARGUMENT;
    *supported = 1;
    return NVML_SUCCESS;
}

/* slot 241: the GPU's own NUMA node for 535's topo -m "GPU NUMA ID" (550 calls nvmlDeviceGetNumaNodeId):
 * f(device, unsigned *node, ...); NOT_SUPPORTED prints N/A. */
static int slot241(nvmlDevice_t device, unsigned *node) { return nvmlDeviceGetNumaNodeId(device, node); }

/* nvidia-smi -r (traced with a table whose every slot logs its calls): slot 20 asks whether the GPU is the
 * primary (console) GPU, f(device, unsigned *primary); 169 (fabric state) and 182/183/184 (the group of
 * GPUs reset together) only need to succeed, their outputs are nvidia-smi's own; 168 resets the group,
 * f(unsigned count, nvmlDevice_t *devices, ...). IN_USE prints "In use by another client". */
static int slot20_primary(nvmlDevice_t device, unsigned *primary) {
    DEV(device);
    if (!primary) return NVML_ERROR_INVALID_ARGUMENT;
    *primary = D->display_active != 0;
    return NVML_SUCCESS;
}
static int slot_succeed(void) { return NVML_SUCCESS; }
static int slot168_reset(unsigned count, nvmlDevice_t *devices) {
    if (!devices && count) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < count; i++) {
        nvmlReturn_t r = mk_reset_gpu(devices[i]);
        if (r != NVML_SUCCESS) return r;
    }
    return NVML_SUCCESS;
}

/* nvidia-smi 555's -pm (its disassembly: a NULL slot 251 is NOT_SUPPORTED): f(device, mode, unsigned *via_daemon);
 * *via_daemon 0 is the legacy path (no nvidia-persistenced), "Enabled Legacy persistence mode for GPU …". */
static int slot251_persistence(nvmlDevice_t device, nvmlEnableState_t mode, unsigned *via_daemon) {
    nvmlReturn_t r = nvmlDeviceSetPersistenceMode(device, mode);
    if (r == NVML_SUCCESS && via_daemon) *via_daemon = 0;
    return r;
}

/* slot 231: nvidia-smi's "GPU Part Number", f(device, char *buf, unsigned length) (traced: length 80). */
static int slot231_gpu_part_number(nvmlDevice_t device, char *buf, unsigned length) {
    DEV(device);
    if (!buf || !length) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->gpu_part_number[0]) return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(D->gpu_part_number) >= length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, D->gpu_part_number);
    return NVML_SUCCESS;
}

/* slot 242: "Addressing Mode", f(device, unsigned *mode, 1, ...): nvmlDeviceAddressingModeType_t. */
static int slot242_addressing_mode(nvmlDevice_t device, unsigned *mode) {
    DEV(device);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->addressing_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *mode = (unsigned)D->addressing_mode;
    return NVML_SUCCESS;
}

/* slot 249: "Sparse Operation Mode", f(device, unsigned *enabled, 1, ...). */
static int slot249_sparse_mode(nvmlDevice_t device, unsigned *enabled) {
    DEV(device);
    if (!enabled) return NVML_ERROR_INVALID_ARGUMENT;
    if (D->sparse_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
    *enabled = (unsigned)D->sparse_mode;
    return NVML_SUCCESS;
}

/* slot 226: PCIe "Atomic Caps", f(device, unsigned caps[2] (outbound, inbound), 1, ...); a 0 mask prints N/A. */
static int slot226_atomic_caps(nvmlDevice_t device, unsigned *caps) {
    DEV(device);
    if (!caps) return NVML_ERROR_INVALID_ARGUMENT;
    if (!D->pcie_atomics_out && !D->pcie_atomics_in) return NVML_ERROR_NOT_SUPPORTED;
    caps[0] = D->pcie_atomics_out;
    caps[1] = D->pcie_atomics_in;
    return NVML_SUCCESS;
}

/* Slots nvidia-smi 535/550 call with a status-returning signature that we do not model:
 * answering NOT_SUPPORTED (without touching arguments) makes it print N/A. */
static int slot_not_supported(void) { return NVML_ERROR_NOT_SUPPORTED; }

/* Every slot we answer; all others stay NULL, which nvidia-smi skips (slot 26, the log sink, too). */
static const struct {
    unsigned short slot;
    const void *fn;
} slots[] = {
    {20, (const void *)slot20_primary},
    {23, (const void *)slot23_link_type},
    {72, (const void *)slot72},
    {81, (const void *)slot81},
    {165, (const void *)slot_not_supported},
    {168, (const void *)slot168_reset},
    {169, (const void *)slot_succeed},
    {182, (const void *)slot_succeed},
    {183, (const void *)slot_succeed},
    {184, (const void *)slot_succeed},
    {209, (const void *)slot_not_supported},
    {213, (const void *)slot213},
    {214, (const void *)slot214},
    {215, (const void *)slot215},
    {226, (const void *)slot226_atomic_caps},
    {230, (const void *)slot230},
    {231, (const void *)slot231_gpu_part_number},
    {232, (const void *)slot_not_supported},
    {237, (const void *)slot_not_supported},
    {240, (const void *)slot240},
    {241, (const void *)slot241},
    {242, (const void *)slot242_addressing_mode},
    {243, (const void *)slot_not_supported},
    {249, (const void *)slot249_sparse_mode},
    {251, (const void *)slot251_persistence},
};

#define EXPORT_SLOTS 256
static const void *export_table[EXPORT_SLOTS];
static pthread_once_t export_once = PTHREAD_ONCE_INIT;
static void build_export_table(void) {
    export_table[0] = (const void *)(uintptr_t)(EXPORT_SLOTS * sizeof(void *)); /* size in bytes */
    for (unsigned i = 0; i < sizeof slots / sizeof slots[0]; i++)
        if (slots[i].slot > 0 && slots[i].slot < EXPORT_SLOTS) export_table[slots[i].slot] = slots[i].fn;
}

static const unsigned char export_uuid[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                              0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
static const void *empty_table[1] = {(const void *)0};

MK_API nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *uuid) {
    if (table == NULL || uuid == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memcmp(uuid, export_uuid, 16) == 0) {
        pthread_once(&export_once, build_export_table);
        *table = export_table;
    } else {
        if (mk_g_debug) {
            const unsigned char *u = uuid;
            mk_debug("export table for unknown uuid %02x%02x%02x%02x-...: empty table", u[0], u[1], u[2], u[3]);
        }
        *table = empty_table; /* size 0: every slot is skipped */
    }
    return NVML_SUCCESS;
}

/* Mokka mock NVML: the snapshot model every file shares (never exported).
 * Layers, each file using only those below it (tests/test_static_code.py):
 *   log.c, dynamic.c, failure.c, visible.c, feed.c  <  state.c  <  util.c  <  core.c device.c nvlink.c misc.c  <  export_table.c */
#ifndef MOKKA_H
#define MOKKA_H

#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <time.h>
#include "nvml.h"

#define MK_API __attribute__((visibility("default")))
#define MK_HIDDEN __attribute__((visibility("hidden")))
/* the getters' hot path: inlined even in the -Os build */
#define MK_HOT_INLINE static inline __attribute__((always_inline))

#define MK_MAX_DEVICES 256   /* per snapshot */
#define MK_MAX_LINKS 18      /* NVML_NVLINK_MAX_LINKS of the 550 API (the 13.x header says 36) */
/* The 550 driver's profile id ranges (the 13.x header counts later ids the 550 driver rejects). */
#define MK_GI_PROFILE_COUNT 0xA /* NVML_GPU_INSTANCE_PROFILE_COUNT of the 550 API */
#define MK_CI_PROFILE_COUNT 0x8 /* NVML_COMPUTE_INSTANCE_PROFILE_COUNT of the 550 API */
#define MK_MAX_PROCS 32      /* per device */
#define MK_MAX_EVENTS 256    /* per snapshot */
#define MK_MAX_PCIFN 256     /* non-GPU PCI functions per snapshot */
#define MK_MAX_MIG_PROFILES 16 /* GPU-instance profiles per device */
#define MK_MAX_GI 8          /* GPU instances per device (7 on every board, plus one spare) */
#define MK_MAX_CI 8          /* compute instances (MIG devices) per device */
#define MK_GI_IDS 15         /* GPU-instance ids 0..14 (mig.c: the id a placement gets) */
#define MK_MIG_MEM_SLICES 8  /* memory slices of a MIG-capable GPU (placements) */
#define MK_MIG_SLICES 7      /* its compute slices */
#define MK_CPUSET_WORDS 16   /* 1024 CPUs */
#define MK_STATE_MAGIC "mokka-nvml-state 1"
#define MK_MAX_FILE (16u << 20)
#define MK_SETTINGS_MAGIC "mokka-nvml-settings 1"
#define MK_MAX_SETTINGS (1u << 20)

/* --- snapshot model (filled only through the descriptor tables in state.c) --- */

struct mk_link {
    uint32_t state;           /* 1 active */
    uint32_t remote_type;     /* nvmlIntNvLinkDeviceType_t: 0 GPU, 1 IBMNPU, 2 SWITCH, 255 unknown */
    char remote_bus_id[32];   /* "00000000:1B:00.0"; switch: "FFFFFFFF:FF:FF.0" */
    uint32_t remote_device_id;/* PCI device id of the remote end (combined) */
    uint32_t version;         /* 0 = device default */
    uint64_t err_replay, err_recovery, err_crc_flit, err_crc_data, err_ecc;
    uint64_t tx_bytes, rx_bytes;
    uint32_t err_inject;      /* 1: the device's injected error rate accrues on this link */
    uint64_t err_injected;    /* injected errors accrued before the device's nvlink_error epoch */
};

/* a PCI function that is not a GPU (HCA, PCI-visible NVSwitch): for nvidia-smi's topo -m */
struct mk_pcifn {
    char bus_id[32];
    int32_t root_complex;     /* index of its root complex, -1 unknown */
    int32_t pcie_switch;      /* PCIe switch it sits behind (shared with a GPU), -1 none */
    int32_t numa_node;        /* -1 unknown */
    uint32_t pci_domain, pci_bus, pci_dev, pci_func;
};

struct mk_proc {
    uint32_t pid;
    uint32_t type;            /* 0 compute, 1 graphics, 2 MPS compute */
    uint64_t used_bytes;
    uint32_t sm_util, mem_util, enc_util, dec_util;
    char name[128];
};

/* a GPU-instance profile of a MIG-capable GPU */
struct mk_mig_profile {
    uint32_t profile, id, slices, instances, sms, copy_engines, decoders, encoders, jpegs, ofas;
    uint64_t memory_mb;
    char name[32];
    uint32_t placement_size;
    uint8_t placements[8];
    uint32_t placement_n;
};

struct mk_event {
    uint64_t seq;             /* strictly increasing within the file, > 0 */
    uint32_t device;          /* device index */
    uint64_t type;            /* nvmlEventType bit, default 8 (XID critical) */
    uint64_t data;            /* Xid code */
};

struct mk_device {
    uint32_t present;         /* set when any device.<i> key was seen */
    uint32_t node_index;      /* its index in the state file and the setter record (visible.c renumbers the rest) */
    /* identity */
    char name[96], uuid[96], serial[32], board_part_number[32], gpu_part_number[32], vbios[32];
    uint8_t name_len, uuid_len; /* their strlen, derived at snapshot load (state.c): GetName/GetUUID scan nothing */
    char inforom_image[32], inforom_oem[16], inforom_ecc[16], inforom_power[16];
    int32_t brand, architecture, cc_major, cc_minor;
    uint32_t minor_number, board_id, multi_gpu_board, module_id, num_cores;
    int32_t lost;             /* 1: GPU_IS_LOST for everything on this device; MK_LOST_LATER: a delayed failure may start */
    /* pci */
    char bus_id[32];
    uint32_t pci_device_id, pci_subsystem_id, pci_base_class, pci_sub_class;
    uint32_t pcie_atomics_out, pcie_atomics_in;
    uint32_t pcie_max_gen, pcie_gpu_max_gen, pcie_host_max_gen, pcie_cur_gen, pcie_max_width, pcie_cur_width;
    uint32_t pcie_replay, pcie_tx_kbps, pcie_rx_kbps;
    /* derived at parse time from bus_id */
    uint32_t pci_domain, pci_bus, pci_dev, pci_func;
    /* memory */
    uint64_t mem_total, mem_reserved, mem_used, bar1_total, bar1_used;
    uint32_t mem_bus_width;
    /* thermal: 0 = not supported */
    uint32_t temp_gpu, temp_memory, temp_shutdown, temp_slowdown, temp_mem_max, temp_gpu_max;
    int32_t addressing_mode, sparse_mode;
    uint32_t power_module_limit, power_module_default, power_module_min, power_module_max; /* 0: no module scope */
    uint32_t temp_tlimit;     /* 1: report T.Limit fields (Ada+) */
    int32_t temp_tlimit_shutdown, temp_tlimit_slowdown, temp_tlimit_mem_max, temp_tlimit_gpu_max;
    /* power */
    uint32_t power_supported, power_usage, power_limit, power_enforced, power_default;
    uint32_t power_min, power_max, power_mode;
    uint64_t energy_mj;
    /* fan */
    uint32_t fan_count, fan_speed;
    /* clocks (MHz): [graphics, sm, mem, video] */
    uint32_t clk_cur[4], clk_max[4], clk_app[4], clk_default_app[4], clk_boost[4];
    uint32_t sclk_memory[4], sclk_lowest_khz[4], sclk_step_khz[4], sclk_rungs[4]; /* supported clocks, per memory clock */
    uint32_t clk_locked[2][2];  /* [graphics, memory][min, max], 0: not locked */
    int32_t auto_boost;       /* -1 not supported */
    uint64_t throttle_reasons, supported_throttle_reasons;
    uint64_t viol_power_ns, viol_thermal_ns, viol_sync_boost_ns;
    /* perf/util */
    uint32_t pstate, util_gpu, util_mem, util_enc, util_dec, util_jpg, util_ofa;
    uint32_t enc_sessions, enc_fps, enc_latency, fbc_sessions, fbc_fps, fbc_latency;
    /* ecc: [vol|agg][sbe|dbe][l1,l2,dram,reg,tex,cbu,sram] */
    int32_t ecc_supported;
    uint32_t ecc_current, ecc_pending, ecc_default;
    uint64_t ecc[2][2][7];
    uint32_t sram_threshold;
    /* retired pages / remapped rows */
    uint32_t retired_supported, retired_sbe, retired_dbe, retired_pending;
    uint32_t remap_supported, remap_cor, remap_unc, remap_pending, remap_failure;
    uint32_t remap_hist[5];   /* max high partial low none */
    /* modes */
    uint32_t persistence, compute_mode, display_mode, display_active, accounting, accounting_buffer;
    uint32_t virt_mode;
    int32_t host_vgpu_mode, driver_model, gom_current, gom_pending;
    uint32_t gsp_mode, gsp_default_mode;
    char gsp_version[32];
    int32_t mig_current, mig_pending;  /* -1 = not supported */
    uint32_t mig_max;
    struct mk_mig_profile mig_profile[MK_MAX_MIG_PROFILES];
    uint32_t nmig_profile;
    uint8_t mig_gi[MK_MAX_GI * 3];      /* per GPU instance: id, mig_profile row, placement start */
    uint32_t mig_gi_n;
    uint8_t mig_ci[MK_MAX_CI * 4];      /* per compute instance: GPU instance id, id, profile, start slice */
    uint32_t mig_ci_n;
    /* fabric / c2c */
    uint32_t fabric_supported, fabric_clique, fabric_state, fabric_status, fabric_health;
    uint32_t fabric_auto;     /* 1: state follows system.fabric_ready_file (in progress / completed) */
    char fabric_cluster[48];
    uint32_t c2c_supported, c2c_enabled;
    /* platform (13.x API): PDI, IRQ, the rack position of Blackwell boards (addressing mode: thermal block) */
    uint32_t irq;
    uint64_t pdi;
    uint32_t platform_supported, platform_slot, platform_tray, platform_host, platform_peer;
    char platform_chassis[16];
    /* topology / affinity */
    int32_t numa_node;        /* nearest NUMA node (memory affinity, PCIe levels); -1 not supported */
    int32_t gpu_numa_node;    /* the GPU's own NUMA node (coherent C2C systems); -1 not supported */
    int32_t root_complex;     /* index of its root complex, -1 unknown */
    int32_t pcie_switch;      /* PCIe switch it sits behind, -1 none */
    uint64_t cpuset[MK_CPUSET_WORDS];
    uint32_t cpuset_set;
    uint8_t topo_level[MK_MAX_DEVICES];   /* nvmlGpuTopologyLevel_t / 10 per peer */
    uint32_t topo_level_n;
    uint8_t topo_nvlink[MK_MAX_DEVICES];  /* NV# links per peer */
    uint32_t topo_nvlink_n;
    /* nvlink */
    uint32_t nvlink_count, nvlink_version, nvlink_speed_mbps, nvswitch_links;
    struct mk_link link[MK_MAX_LINKS];
    uint64_t nvlink_err_rate_milli; /* injected errors per 1000 s on each link with err_inject */
    uint64_t nvlink_err_epoch_ms;   /* wall-clock ms since 1970 when that rate took effect */
    /* time-varying metrics (values change once per wall-clock second, identically in every process) */
    uint64_t dyn_seed;
    uint32_t dyn_temp, dyn_temp_base, dyn_temp_var, dyn_temp_ramp, dyn_temp_period;
    uint32_t dyn_power, dyn_power_base, dyn_power_var;
    uint32_t dyn_util, dyn_util_pattern, dyn_util_gpu_min, dyn_util_gpu_max, dyn_util_mem_min, dyn_util_mem_max,
        dyn_util_burst_period;
    /* their values for the snapshot's dyn_second (dynamic.c); atomic: a refresh stores them while getters load */
    _Atomic uint32_t dyn_temp_now, dyn_power_now;
    _Atomic uint64_t dyn_util_now; /* gpu | memory << 32: one word, a reader never pairs two seconds */
    /* a failure each process starts after calls on the GPU (failure.c); 0: none */
    uint32_t fail_mode, fail_probability_ppb, fail_xid;
    uint64_t fail_after_calls, fail_seed;
    /* GPU performance monitoring (misc.c), confidential computing */
    uint32_t gpm_supported, gpm_pcie_tx, gpm_pcie_rx;
    uint32_t cc_supported;
    int32_t fan_target;       /* target fan speed, %; -1: the fan speed */
    /* DCGM's setters (admin.c): the application-clock restriction, the target temperature and its range */
    uint32_t app_clocks_unrestricted, temp_target, temp_target_min, temp_target_max;
    uint32_t temp_tlimit_ref; /* °C the T.Limit margin counts down to */
    char p0_modes[320];       /* levels.c: GetPerformanceModes' string, MK_P0_PERF then GetCurrentClockFreqs' */
    uint32_t bbx_flush_us;    /* duration of this run's last infoROM BBX flush; 0: none yet */
    char hostname[64];        /* SetHostname_v1's value (setter record); NVML_DEVICE_HOSTNAME_BUFFER_SIZE */
    /* processes */
    uint32_t nproc, proc_cap;
    struct mk_proc *proc;     /* nproc entries, allocated only when the device has processes */
};

struct mk_snap {
    char driver_version[80], nvml_version[80];
    uint32_t cuda_version;    /* 12040 */
    uint32_t init_error;      /* nvmlReturn_t returned by nvmlInit* (0 ok) */
    uint32_t declared_count;  /* system.device_count */
    uint32_t ndev, dev_cap;
    struct mk_device *dev;    /* ndev entries (dev_cap allocated) */
    uint32_t nevent, event_cap;
    struct mk_event *events;  /* nevent entries, allocated when the file has events */
    uint64_t max_seq;
    uint32_t npcifn, pcifn_cap;
    struct mk_pcifn *pcifn;   /* npcifn entries, allocated when the file has any */
    char fabric_ready_file[512]; /* marker of a ready fabric manager (absolute, or relative to the state file's directory) */
    uint64_t booted_ms;       /* wall-clock ms the node came up; 0 unknown */
    uint64_t dyn_second;      /* the wall-clock second the devices' dyn_*_now hold (dynamic.c); 0 none yet */
    uint32_t ndynamic;        /* devices with a dynamic metric, counted at the first evaluation */
    /* bookkeeping */
    struct mk_snap *retired_next;
};

/* the level token p0_modes starts with; the rest is the current level's string */
#define MK_P0_PERF "perf=0, "

/* handle: a small, stable, dereferenceable allocation per index; a power-of-two size, so that telling a
 * handle of the tables from any other pointer is a mask and a compare (util.h), not a division */
struct nvmlDevice_st {
    uint32_t magic;
    uint32_t index;
    uint64_t reserved[2];
    uint64_t pad;
};
_Static_assert((sizeof(struct nvmlDevice_st) & (sizeof(struct nvmlDevice_st) - 1)) == 0,
               "handle size is a power of two");
#define MK_HANDLE_MAGIC 0x4D4B4E56u /* "VNKM" */
#define MK_LOST_LATER (-1)         /* `lost` of a GPU whose delayed failure has not started (failure.c sets it) */

#endif

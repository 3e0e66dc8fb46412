/*
 * mokka-ib shim, verbs part: when the real ibv_open_device() fails (a simulated device has no
 * kernel driver), it returns a context whose query verbs answer from the staged sysfs (the
 * device's ibdev_path, which honours SYSFS_PATH), so ibv_devinfo works.  Contexts of real
 * devices are left to libibverbs: every wrapper below hands them to the real function.  Data-path verbs (PD, MR, CQ, QP, ...) are not simulated: the context
 * leaves them NULL and libibverbs' inline wrappers report EOPNOTSUPP/ENOSYS.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <infiniband/verbs.h>

#include "shim.h"

#define MELLANOX_OUI 0x02c9
#define GID_TABLE_LEN 128
#define PKEY_TABLE_LEN 128

struct sim_context {
    struct verbs_context vctx; /* must stay first: ibv_context is embedded at its end */
    struct sim_context *next;
};

/* The contexts we made (few, and short-lived: a plain list). */
static struct sim_context *sim_contexts;
static pthread_mutex_t sim_contexts_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_sim_context(struct ibv_context *ctx)
{
    int found = 0;
    pthread_mutex_lock(&sim_contexts_lock);
    for (struct sim_context *c = sim_contexts; c != NULL && !found; c = c->next)
        found = &c->vctx.context == ctx;
    pthread_mutex_unlock(&sim_contexts_lock);
    return found;
}

/* The real libibverbs function of that name (default version), for contexts of real devices. */
#define real_verbs(name, rettype, ...)                                                        \
    static rettype (*real_##name)(__VA_ARGS__) = NULL;                                        \
    if (real_##name == NULL)                                                                  \
        real_##name = (rettype (*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);

/* ---- utilities -------------------------------------------------------------------------------- */

static const char *ibdev_path(struct ibv_context *ctx)
{
    return ctx->device->ibdev_path;
}

static uint64_t read_guid(const char *dir, const char *name)
{
    char text[64];
    unsigned a, b, c, d;
    if (shim_read_attr(dir, name, text, sizeof(text)) < 0 || sscanf(text, "%x:%x:%x:%x", &a, &b, &c, &d) != 4)
        return 0;
    return ((uint64_t)a << 48) | ((uint64_t)b << 32) | ((uint64_t)c << 16) | d;
}

static long read_number(const char *dir, const char *name, int base)
{
    char text[64];
    if (shim_read_attr(dir, name, text, sizeof(text)) < 0)
        return -1;
    return strtol(text, NULL, base);
}

static int port_dir(struct ibv_context *ctx, uint8_t port, char *out, size_t size)
{
    char probe[64];
    if ((size_t)snprintf(out, size, "%s/ports/%u", ibdev_path(ctx), port) >= size ||
        shim_read_attr(out, "state", probe, sizeof(probe)) < 0)
        return EINVAL;
    return 0;
}

/* "400 Gb/sec (4X NDR)" -> IBV_WIDTH_* and IBV speed codes */
static void parse_rate(const char *text, uint8_t *width, uint8_t *speed)
{
    static const struct { const char *name; uint8_t code; } speeds[] = {
        {"SDR", 1}, {"DDR", 2}, {"QDR", 4}, {"FDR10", 8}, {"FDR", 16}, {"EDR", 32}, {"HDR", 64}, {"NDR", 128},
        {"XDR", 128}, /* libibverbs 44 has no XDR code in active_speed */
    };
    unsigned lanes = 4;
    char name[16] = "";
    const char *open = strchr(text, '(');
    if (open != NULL)
        sscanf(open + 1, "%uX %15[A-Z0-9]", &lanes, name);
    *width = lanes == 1 ? 1 : lanes == 8 ? 4 : lanes == 12 ? 8 : lanes == 2 ? 16 : 2;
    *speed = 1;
    for (size_t i = 0; i < sizeof(speeds) / sizeof(speeds[0]); i++)
        if (strcmp(name, speeds[i].name) == 0)
            *speed = speeds[i].code;
}

static int read_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    char dir[4096], name[32], text[64];
    unsigned short words[8];
    if (index < 0 || index >= GID_TABLE_LEN || port_dir(ctx, port, dir, sizeof(dir)))
        return EINVAL;
    memset(gid, 0, sizeof(*gid));
    snprintf(name, sizeof(name), "gids/%d", index);
    if (shim_read_attr(dir, name, text, sizeof(text)) < 0)
        return 0; /* unpopulated entries read as zero, as on a real port */
    if (sscanf(text, "%hx:%hx:%hx:%hx:%hx:%hx:%hx:%hx", &words[0], &words[1], &words[2], &words[3], &words[4],
               &words[5], &words[6], &words[7]) != 8)
        return EINVAL;
    for (int i = 0; i < 8; i++) {
        gid->raw[2 * i] = (uint8_t)(words[i] >> 8);
        gid->raw[2 * i + 1] = (uint8_t)words[i];
    }
    return 0;
}

/* ---- the context's query verbs ---------------------------------------------------------------- */

static int sim_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
                               struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ibv_device_attr_ex full;
    struct ibv_device_attr *dev = &full.orig_attr;
    const char *path = ibdev_path(ctx);
    char text[64];
    (void)input;
    memset(&full, 0, sizeof(full));
    if (shim_read_attr(path, "fw_ver", dev->fw_ver, sizeof(dev->fw_ver)) < 0)
        return ENODEV;
    dev->node_guid = htobe64(read_guid(path, "node_guid"));
    dev->sys_image_guid = htobe64(read_guid(path, "sys_image_guid"));
    dev->vendor_id = MELLANOX_OUI;
    if (shim_read_attr(path, "hca_type", text, sizeof(text)) > 0) /* MT4129 -> part 4129 (PCI 0x1021) */
        dev->vendor_part_id = (uint32_t)strtoul(text + strcspn(text, "0123456789"), NULL, 10);
    long hw = read_number(path, "hw_rev", 0);
    dev->hw_ver = hw > 0 ? (uint32_t)hw : 0;
    dev->max_mr_size = UINT64_MAX;
    dev->page_size_cap = 0xfffffffffffff000ULL;
    dev->max_qp = 131072;
    dev->max_qp_wr = 32768;
    dev->device_cap_flags = IBV_DEVICE_BAD_PKEY_CNTR | IBV_DEVICE_BAD_QKEY_CNTR | IBV_DEVICE_AUTO_PATH_MIG |
                            IBV_DEVICE_CHANGE_PHY_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SYS_IMAGE_GUID |
                            IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_XRC |
                            IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    dev->max_sge = 30;
    dev->max_sge_rd = 30;
    dev->max_cq = 16777216;
    dev->max_cqe = 4194303;
    dev->max_mr = 16777216;
    dev->max_pd = 16777216;
    dev->max_qp_rd_atom = 16;
    dev->max_res_rd_atom = 2097152;
    dev->max_qp_init_rd_atom = 16;
    dev->atomic_cap = IBV_ATOMIC_HCA;
    dev->max_mw = 16777216;
    dev->max_mcast_grp = 2097152;
    dev->max_mcast_qp_attach = 240;
    dev->max_total_mcast_qp_attach = 503316480;
    dev->max_ah = INT32_MAX;
    dev->max_srq = 8388608;
    dev->max_srq_wr = 32767;
    dev->max_srq_sge = 31;
    dev->max_pkeys = PKEY_TABLE_LEN;
    dev->local_ca_ack_delay = 16;
    dev->phys_port_cnt = 1;
    memcpy(attr, &full, attr_size < sizeof(full) ? attr_size : sizeof(full));
    return 0;
}

static int sim_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t attr_size)
{
    struct ibv_port_attr out;
    char dir[4096], text[64];
    if (port_dir(ctx, port, dir, sizeof(dir)))
        return EINVAL;
    memset(&out, 0, sizeof(out));
    out.state = (enum ibv_port_state)read_number(dir, "state", 10);
    out.phys_state = (uint8_t)read_number(dir, "phys_state", 10);
    out.lid = (uint16_t)read_number(dir, "lid", 16);
    out.sm_lid = (uint16_t)read_number(dir, "sm_lid", 16);
    out.lmc = (uint8_t)read_number(dir, "lid_mask_count", 10);
    out.sm_sl = (uint8_t)read_number(dir, "sm_sl", 10);
    out.port_cap_flags = (uint32_t)read_number(dir, "cap_mask", 16);
    out.max_mtu = IBV_MTU_4096;
    out.active_mtu = out.state == IBV_PORT_ACTIVE ? IBV_MTU_4096 : IBV_MTU_256;
    out.gid_tbl_len = GID_TABLE_LEN;
    out.pkey_tbl_len = PKEY_TABLE_LEN;
    out.max_msg_sz = 0x40000000;
    out.max_vl_num = 4;
    out.subnet_timeout = 18;
    if (shim_read_attr(dir, "rate", text, sizeof(text)) > 0)
        parse_rate(text, &out.active_width, &out.active_speed);
    out.link_layer = IBV_LINK_LAYER_INFINIBAND;
    if (shim_read_attr(dir, "link_layer", text, sizeof(text)) > 0 && strcmp(text, "Ethernet") == 0)
        out.link_layer = IBV_LINK_LAYER_ETHERNET;
    memcpy(attr, &out, attr_size < sizeof(out) ? attr_size : sizeof(out));
    return 0;
}

/* ---- Overridden libibverbs functions ---------------------------------------------------------- */

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    real_verbs(ibv_open_device, struct ibv_context *, struct ibv_device *);
    char probe[64];
    if (real_ibv_open_device != NULL) {
        struct ibv_context *real = real_ibv_open_device(device);
        if (real != NULL)
            return real;
    }
    if (device == NULL || shim_read_attr(device->ibdev_path, "node_guid", probe, sizeof(probe)) < 0) {
        errno = ENODEV;
        return NULL;
    }
    struct sim_context *sim = calloc(1, sizeof(*sim));
    if (sim == NULL)
        return NULL;
    struct verbs_context *vctx = &sim->vctx;
    vctx->sz = sizeof(*vctx);
    vctx->query_port = sim_query_port;
    vctx->query_device_ex = sim_query_device_ex;
    vctx->context.device = device;
    vctx->context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    vctx->context.cmd_fd = -1;
    vctx->context.async_fd = -1;
    vctx->context.num_comp_vectors = 1;
    pthread_mutex_init(&vctx->context.mutex, NULL);
    pthread_mutex_lock(&sim_contexts_lock);
    sim->next = sim_contexts;
    sim_contexts = sim;
    pthread_mutex_unlock(&sim_contexts_lock);
    DBG("opened %s from %s", device->name, device->ibdev_path);
    return &vctx->context;
}

int ibv_close_device(struct ibv_context *context)
{
    real_verbs(ibv_close_device, int, struct ibv_context *);
    if (!is_sim_context(context))
        return real_ibv_close_device ? real_ibv_close_device(context) : EINVAL;
    pthread_mutex_lock(&sim_contexts_lock);
    for (struct sim_context **link = &sim_contexts; *link != NULL; link = &(*link)->next) {
        if (&(*link)->vctx.context == context) {
            struct sim_context *gone = *link;
            *link = gone->next;
            pthread_mutex_destroy(&context->mutex);
            free(gone);
            break;
        }
    }
    pthread_mutex_unlock(&sim_contexts_lock);
    return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    real_verbs(ibv_query_device, int, struct ibv_context *, struct ibv_device_attr *);
    if (!is_sim_context(context))
        return real_ibv_query_device ? real_ibv_query_device(context, attr) : EINVAL;
    struct ibv_device_attr_ex full;
    int ret = sim_query_device_ex(context, NULL, &full, sizeof(full));
    if (ret == 0)
        *attr = full.orig_attr;
    return ret;
}

/* The exported (non-inline) entry point; its struct is the pre-extension layout, a prefix of ours. */
#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port, struct _compat_ibv_port_attr *attr)
{
    real_verbs(ibv_query_port, int, struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
    if (!is_sim_context(context))
        return real_ibv_query_port ? real_ibv_query_port(context, port, attr) : EINVAL;
    /* the compat layout is the prefix of struct ibv_port_attr up to (not including) flags */
    return sim_query_port(context, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, flags));
}

int ibv_query_gid(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid)
{
    real_verbs(ibv_query_gid, int, struct ibv_context *, uint8_t, int, union ibv_gid *);
    if (!is_sim_context(context))
        return real_ibv_query_gid ? real_ibv_query_gid(context, port, index, gid) : -1;
    return read_gid(context, port, index, gid) ? -1 : 0;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port, int index, __be16 *pkey)
{
    real_verbs(ibv_query_pkey, int, struct ibv_context *, uint8_t, int, __be16 *);
    if (!is_sim_context(context))
        return real_ibv_query_pkey ? real_ibv_query_pkey(context, port, index, pkey) : -1;
    char dir[4096], name[32];
    if (index < 0 || index >= PKEY_TABLE_LEN || port_dir(context, port, dir, sizeof(dir)))
        return -1;
    snprintf(name, sizeof(name), "pkeys/%d", index);
    long value = read_number(dir, name, 16);
    *pkey = htobe16(value < 0 ? 0 : (uint16_t)value);
    return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
                      uint32_t flags, size_t entry_size)
{
    real_verbs(_ibv_query_gid_ex, int, struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t,
               size_t);
    if (!is_sim_context(context))
        return real__ibv_query_gid_ex ? real__ibv_query_gid_ex(context, port, index, entry, flags, entry_size)
                                      : EINVAL;
    struct ibv_gid_entry out = {.gid_index = index, .port_num = port, .gid_type = IBV_GID_TYPE_IB};
    (void)flags;
    if (port > 255 || read_gid(context, (uint8_t)port, (int)index, &out.gid))
        return EINVAL;
    if (out.gid.global.interface_id == 0)
        return ENODATA;
    memcpy(entry, &out, entry_size < sizeof(out) ? entry_size : sizeof(out));
    return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries,
                             uint32_t flags, size_t entry_size)
{
    real_verbs(_ibv_query_gid_table, ssize_t, struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t, size_t);
    if (!is_sim_context(context))
        return real__ibv_query_gid_table ? real__ibv_query_gid_table(context, entries, max_entries, flags, entry_size)
                                         : -EINVAL;
    size_t count = 0;
    for (uint32_t index = 0; index < GID_TABLE_LEN && count < max_entries; index++) {
        struct ibv_gid_entry entry;
        if (_ibv_query_gid_ex(context, 1, index, &entry, flags, sizeof(entry)) == 0)
            memcpy((char *)entries + count++ * entry_size, &entry, entry_size < sizeof(entry) ? entry_size : sizeof(entry));
    }
    return (ssize_t)count;
}

/* Private libibverbs API that ibv_devinfo -v calls directly (rdma-core's driver.h; 0 = IB/RoCE v1). */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port, unsigned int index, int *type);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port, unsigned int index, int *type)
{
    real_verbs(ibv_query_gid_type, int, struct ibv_context *, uint8_t, unsigned int, int *);
    if (!is_sim_context(context))
        return real_ibv_query_gid_type ? real_ibv_query_gid_type(context, port, index, type) : -1;
    union ibv_gid gid;
    if (read_gid(context, port, (int)index, &gid))
        return -1;
    *type = 0;
    return 0;
}

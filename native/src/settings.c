/* settings.c: the setter record's writer (format and reader: state.c; design: native/README.md, "Settings").
 * Above util.c, below the areas that change node state (setters.c, export_table.c's GPU reset).
 *
 * One writer at a time (flock on `<record>.lock`, mode 0600 so no other user can hold it, or 0666 in a
 * directory every user may write; a writer waits at most MOKKA_LOCK_TIMEOUT_S, default 10 s) reads the record, replaces the changed keys and publishes the result by write-temp, fsync and rename: readers,
 * which never lock, see the old record or the new one, and a writer killed at any point leaves the
 * old record in place (and at most the fixed-name temp file, which the next writer truncates). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "settings.h"

/* a process that gets the node's state from its service (a container) cannot write the node's record */
nvmlReturn_t mk_settings_permitted(void) {
    return geteuid() == 0 && !mk_state_from_feed() ? NVML_SUCCESS : NVML_ERROR_NO_PERMISSION;
}

#define ECC_KEYS(counter)                                                                                      \
    {"ecc." counter ".corrected.l1", "ecc." counter ".corrected.l2", "ecc." counter ".corrected.dram",          \
     "ecc." counter ".corrected.register", "ecc." counter ".corrected.texture", "ecc." counter ".corrected.cbu", \
     "ecc." counter ".corrected.sram", "ecc." counter ".uncorrected.l1", "ecc." counter ".uncorrected.l2",      \
     "ecc." counter ".uncorrected.dram", "ecc." counter ".uncorrected.register",                               \
     "ecc." counter ".uncorrected.texture", "ecc." counter ".uncorrected.cbu", "ecc." counter ".uncorrected.sram"}
const char *const mk_ecc_count_keys[2][MK_ECC_COUNT_KEYS] = {ECC_KEYS("volatile"), ECC_KEYS("aggregate")};
#undef ECC_KEYS

/* the record's current lines (without header and `end`), or an empty text when there is none */
static char *read_record(int dfd, const char *name, size_t *len) {
    *len = 0;
    char *buf = malloc(MK_MAX_SETTINGS + 1);
    if (!buf) return NULL;
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return buf;
    struct stat st;
    size_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        ssize_t r;
        while (got < MK_MAX_SETTINGS && (r = read(fd, buf + got, MK_MAX_SETTINGS - got)) > 0) got += (size_t)r;
    }
    close(fd);
    size_t magic = sizeof(MK_SETTINGS_MAGIC) - 1;
    if (got <= magic || memcmp(buf, MK_SETTINGS_MAGIC "\n", magic + 1) != 0) {
        if (got) mk_log("setter record %s: not a record, rewritten", name);
        return buf;
    }
    memmove(buf, buf + magic + 1, got - magic - 1);
    *len = got - magic - 1;
    return buf;
}

static int line_is(const char *line, size_t ll, uint32_t dev, const struct mk_setting *set, size_t n) {
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "device.%u.", dev);
    if (ll < (size_t)pl || memcmp(line, prefix, (size_t)pl) != 0) return 0;
    for (size_t i = 0; i < n; i++) {
        size_t kl = strlen(set[i].key);
        if (ll > (size_t)pl + kl && memcmp(line + pl, set[i].key, kl) == 0 && line[pl + kl] == '=') return 1;
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

struct fixed { const struct mk_setting *set; size_t n; };

static nvmlReturn_t copy_fixed(struct mk_snap *S, uint32_t dev, void *ctx, struct mk_setting *out, size_t *n) {
    const struct fixed *f = ctx;
    (void)S; (void)dev;
    memcpy(out, f->set, f->n * sizeof *out);
    *n = f->n;
    return NVML_SUCCESS;
}

nvmlReturn_t mk_settings_write(uint32_t dev, const struct mk_setting *set, size_t n) {
    if (n > MK_MAX_SETTING_KEYS) return NVML_ERROR_INVALID_ARGUMENT;
    struct fixed f = {set, n};
    return mk_settings_apply(dev, copy_fixed, &f);
}

nvmlReturn_t mk_settings_set(uint32_t dev, const struct mk_setting *set, size_t n) {
    nvmlReturn_t r = mk_settings_permitted();
    return r != NVML_SUCCESS ? r : mk_settings_write(dev, set, n);
}

/* the pid /proc/locks gives for the flock on `inode`, else 0 */
static long lock_holder(ino_t inode) {
    FILE *f = fopen("/proc/locks", "re");
    if (!f) return 0;
    char line[256], field[32]; /* "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" */
    long pid, holder = 0;
    snprintf(field, sizeof field, ":%lu ", (unsigned long)inode);
    while (!holder && fgets(line, sizeof line, f)) {
        const char *flock_at = strstr(line, " FLOCK ");
        if (flock_at && strstr(line, field) && sscanf(flock_at + 7, "%*s %*s %ld", &pid) == 1) holder = pid;
    }
    fclose(f);
    return holder;
}

static double lock_timeout_s(void) {
    const char *text = getenv("MOKKA_LOCK_TIMEOUT_S");
    char *end;
    double v = text ? strtod(text, &end) : 10;
    return text && (end == text || *end || !(v >= 0 && v < 86400)) ? 10 : v;
}

/* the lock's mode: the owner's only, unless the directory lets every user write (then every user already
 * may replace the record it guards, and must be able to take it) */
static mode_t lock_mode(int dfd) {
    struct stat st;
    return fstat(dfd, &st) == 0 && (st.st_mode & S_IWOTH) ? 0666 : 0600;
}

/* the writers' lock (see the top): its descriptor, or -1 with *ret set (logged) */
static int take_lock(int dfd, const char *name, const char *path, nvmlReturn_t *ret) {
    char lock[512];
    snprintf(lock, sizeof lock, "%s.lock", name);
    mode_t mode = lock_mode(dfd);
    /* open an existing lock without O_CREAT: in a sticky directory fs.protected_regular refuses O_CREAT on
     * another user's file */
    int fd = openat(dfd, lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) fd = openat(dfd, lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode);
    struct stat st;
    *ret = fd < 0 && errno == EACCES ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid == geteuid() && fchmod(fd, mode) != 0)) {
        mk_log("setter record %s: lock %s: %s", path, lock, fd < 0 ? strerror(errno) : "not a file of its own");
        if (fd >= 0) close(fd);
        return -1;
    }
    struct timespec now, pause = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &now);
    double deadline = (double)now.tv_sec + now.tv_nsec / 1e9 + lock_timeout_s();
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((errno != EWOULDBLOCK && errno != EINTR) || (double)now.tv_sec + now.tv_nsec / 1e9 >= deadline) {
            mk_log("setter record %s: lock %s held by pid %ld past the timeout (MOKKA_LOCK_TIMEOUT_S); "
                   "nothing written", path, lock, lock_holder(st.st_ino));
            *ret = NVML_ERROR_TIMEOUT;
            close(fd);
            return -1;
        }
        nanosleep(&pause, NULL);
        if (pause.tv_nsec < 50000000) pause.tv_nsec *= 2;
    }
    return fd;
}

/* what the change would be, on the node as it is now: its refusal, else NO_PERMISSION (nothing written) */
static nvmlReturn_t refuse_from_feed(uint32_t dev, mk_settings_fn compute, void *ctx) {
    struct mk_setting set[MK_MAX_SETTING_KEYS];
    size_t n = 0;
    nvmlReturn_t ret = compute(mk_snapshot(), dev, ctx, set, &n);
    return ret != NVML_SUCCESS ? ret : NVML_ERROR_NO_PERMISSION;
}

nvmlReturn_t mk_settings_apply(uint32_t dev, mk_settings_fn compute, void *ctx) {
    if (mk_state_from_feed()) return refuse_from_feed(dev, compute, ctx);
    const char *path = mk_settings_path();
    const char *slash = strrchr(path, '/');
    char dir[4096], tmp[512];
    const char *name = slash ? slash + 1 : path;
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        mk_log("setter record %s: %s", path, strerror(errno));
        return NVML_ERROR_UNKNOWN;
    }
    nvmlReturn_t locked;
    int lfd = take_lock(dfd, name, path, &locked);
    if (lfd < 0) {
        close(dfd);
        return locked;
    }
    /* decide on the node as it is now, under the lock: no other writer can change it in between */
    mk_refresh_slow(mk_now_coarse(), 1);
    struct mk_setting set[MK_MAX_SETTING_KEYS];
    size_t n = 0;
    struct mk_snap *S = mk_snapshot();
    nvmlReturn_t ret = compute(S, dev, ctx, set, &n);
    char *old = NULL, *out = NULL;
    size_t len;
    if (ret != NVML_SUCCESS) goto done;
    ret = NVML_ERROR_GPU_IS_LOST;
    if (S == NULL || dev >= S->ndev) goto done;
    uint32_t record = S->dev[dev].node_index; /* the record names GPUs by their index in the state file */
    ret = NVML_ERROR_UNKNOWN;
    old = read_record(dfd, name, &len);
    out = old ? malloc(len + n * 240 + sizeof(MK_SETTINGS_MAGIC) + 8) : NULL;
    if (!out) goto done;
    size_t o = (size_t)sprintf(out, "%s\n", MK_SETTINGS_MAGIC);
    for (size_t pos = 0; pos < len;) {
        const char *line = old + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + 1;
        if (ll == 0 || (ll == 3 && memcmp(line, "end", 3) == 0) || line_is(line, ll, record, set, n)) continue;
        memcpy(out + o, line, ll);
        o += ll;
        out[o++] = '\n';
    }
    for (size_t i = 0; i < n; i++)
        if (set[i].value[0]) o += (size_t)sprintf(out + o, "device.%u.%.64s=%.159s\n", record, set[i].key, set[i].value);
    o += (size_t)sprintf(out + o, "end\n");
    if (o > MK_MAX_SETTINGS) {
        mk_log("setter record %s: would exceed %u bytes", path, MK_MAX_SETTINGS);
        goto done;
    }
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || fchmod(fd, 0644) != 0 || write_all(fd, out, o) != 0 || fsync(fd) != 0) {
        mk_log("setter record %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        goto done;
    }
    close(fd);
    if (renameat(dfd, tmp, dfd, name) != 0) {
        mk_log("setter record %s: rename: %s", path, strerror(errno));
        goto done;
    }
    ret = NVML_SUCCESS;
done:
    free(old);
    free(out);
    close(lfd); /* closing the only descriptor releases the lock */
    close(dfd);
    if (ret == NVML_SUCCESS) mk_refresh_slow(mk_now_coarse(), 1); /* this process reads its own change back at once */
    return ret;
}

/*
 * mokka-ib shim, sysfs part: the RDMA class directories list their entries in the kernel's order.
 *
 * sysfs (kernfs) returns a directory's entries ordered by a hash of their names (fs/kernfs/dir.c,
 * kernfs_name_hash), so on a real host readdir(/sys/class/infiniband) starts with mlx5_0, and
 * libibumad, which takes the first CA with an active port in readdir order, makes mlx5_0 the default port
 * of every diagnostic.  A staged directory lists in its own filesystem's order (ext4: another hash), so
 * opendir of /sys/class/infiniband{,_mad,_verbs} reads the whole directory once and readdir hands it
 * back in kernfs order.  Every other directory is left alone.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "shim.h"

#define MAX_LISTED 8   /* class directories open at once; more are read unsorted */
#define MAX_ENTRIES 4096

struct listing {
    DIR *dir;
    struct dirent64 *entries;
    size_t count, next;
};
static struct listing listed[MAX_LISTED];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* kernfs_name_hash with no namespace, as a 64-bit kernel computes it; "." and ".." come first. */
static unsigned kernfs_hash(const char *name)
{
    if (strcmp(name, ".") == 0)
        return 0;
    if (strcmp(name, "..") == 0)
        return 1;
    uint64_t hash = 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        hash = (hash + ((uint64_t)*c << 4) + ((uint64_t)*c >> 60)) * 11;
    unsigned h = (unsigned)((hash * 0x61C8864680B583EBull) >> 32) & 0x7fffffffU;
    if (h < 2)
        h += 2;
    if (h >= 0x7fffffffU)
        h = 0x7fffffffU - 1;
    return h;
}

static int kernfs_order(const void *a, const void *b)
{
    const char *x = ((const struct dirent64 *)a)->d_name, *y = ((const struct dirent64 *)b)->d_name;
    unsigned hx = kernfs_hash(x), hy = kernfs_hash(y);
    return hx != hy ? (hx < hy ? -1 : 1) : strcmp(x, y);
}

static int is_rdma_class_dir(const char *path)
{
    static const char *const names[] = {"/class/infiniband", "/class/infiniband_mad", "/class/infiniband_verbs"};
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        if (len >= n && strncmp(path + len - n, names[i], n) == 0)
            return 1;
    }
    return 0;
}

static struct listing *find(DIR *dir)
{
    for (size_t i = 0; i < MAX_LISTED; i++)
        if (listed[i].dir == dir && dir != NULL)
            return &listed[i];
    return NULL;
}

DIR *opendir(const char *name)
{
    libc_func(opendir, DIR *, const char *);
    libc_func(readdir64, struct dirent64 *, DIR *);
    DIR *dir = _opendir(name);
    if (dir == NULL || !is_rdma_class_dir(name))
        return dir;
    int saved = errno;
    pthread_mutex_lock(&lock);
    struct listing *slot = NULL;
    for (size_t i = 0; i < MAX_LISTED && slot == NULL; i++)
        if (listed[i].dir == NULL)
            slot = &listed[i];
    struct dirent64 *entries = slot ? calloc(MAX_ENTRIES, sizeof *entries) : NULL;
    if (entries != NULL) {
        size_t n = 0;
        for (struct dirent64 *e; n < MAX_ENTRIES && (e = _readdir64(dir)) != NULL;)
            entries[n++] = *e;
        qsort(entries, n, sizeof *entries, kernfs_order);
        *slot = (struct listing){dir, entries, n, 0};
        DBG("%s: %zu entries in kernfs order", name, n);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return dir;
}

struct dirent64 *readdir64(DIR *dir)
{
    libc_func(readdir64, struct dirent64 *, DIR *);
    pthread_mutex_lock(&lock);
    struct listing *l = find(dir);
    struct dirent64 *e = l == NULL ? NULL : l->next < l->count ? &l->entries[l->next++] : NULL;
    pthread_mutex_unlock(&lock);
    return l == NULL ? _readdir64(dir) : e;
}

/* x86-64 and aarch64: struct dirent is struct dirent64 */
_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "dirent and dirent64 differ");
struct dirent *readdir(DIR *dir)
{
    libc_func(readdir, struct dirent *, DIR *);
    pthread_mutex_lock(&lock);
    struct listing *l = find(dir);
    struct dirent64 *e = l == NULL ? NULL : l->next < l->count ? &l->entries[l->next++] : NULL;
    pthread_mutex_unlock(&lock);
    return l == NULL ? _readdir(dir) : (struct dirent *)e;
}

void rewinddir(DIR *dir)
{
    libc_func(rewinddir, void, DIR *);
    pthread_mutex_lock(&lock);
    struct listing *l = find(dir);
    if (l != NULL)
        l->next = 0;
    pthread_mutex_unlock(&lock);
    _rewinddir(dir);
}

int closedir(DIR *dir)
{
    libc_func(closedir, int, DIR *);
    pthread_mutex_lock(&lock);
    struct listing *l = find(dir);
    if (l != NULL) {
        free(l->entries);
        *l = (struct listing){0};
    }
    pthread_mutex_unlock(&lock);
    return _closedir(dir);
}

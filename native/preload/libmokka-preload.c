/*
 * libmokka-preload: show a staged Mokka node at the real /sys, /dev and /proc paths
 * to dynamically linked C programs, without namespaces (LD_PRELOAD).
 *
 * Every intercepted call passes its path through one choke point, resolve_path(),
 * keyed on $MOKKA_ROOT (the staged root).  Rules, in order:
 *   - `.`, `..` and `//` are resolved first, as the kernel does, and the result is matched;
 *   - nothing happens unless MOKKA_ROOT is set, the path is under /sys, /dev or /proc,
 *     and $MOKKA_ROOT/var/lib/mokka/preload-disabled does not exist;
 *   - the node's own trees always go to the root, present or not (so a disabled
 *     surface looks absent): /sys/bus/pci, /sys/devices/pci*, /sys/module/nvidia*,
 *     /sys/class/infiniband*, /dev/nvidia*, /dev/infiniband, /proc/driver/nvidia*;
 *   - any other path goes to the root when the root has it and it is not a directory
 *     (/proc/modules, /proc/devices, ...), otherwise to the real file (as umockdev does
 *     for /dev and /proc), so real directories are never hidden.
 * A path that would not fit in PATH_MAX fails with ENAMETOOLONG (fails closed).
 * errno is preserved by the lookup; no shared buffers (thread-safe without locks).
 * The exec family puts LD_PRELOAD and MOKKA_ROOT back if a program dropped them.
 *
 * Environment: MOKKA_ROOT, MOKKA_DEBUG=path (log redirections to stderr), all
 * read with secure_getenv (ignored in a setuid/setgid program, as glibc ignores LD_LIBRARY_PATH).
 * Messages start with "mokka-preload:".
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "path.h"

#define EXPORT __attribute__((visibility("default")))
#define DISABLE_FILE "/var/lib/mokka/preload-disabled"

extern char **environ;

/* ==================================================================================
 * Configuration (read once per process)
 * ================================================================================== */

static struct {
    char root[PATH_MAX];
    size_t root_len;
    int debug_path;
    char self_path[PATH_MAX]; /* this library, for LD_PRELOAD across exec */
} config;

static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static int has_debug_category(const char *value, const char *category)
{
    size_t n = strlen(category);
    for (const char *p = value; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if ((len == n && strncmp(p, category, n) == 0) || (len == 3 && strncmp(p, "all", 3) == 0))
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static void load_config(void)
{
    int saved = errno;
    const char *root = secure_getenv("MOKKA_ROOT");
    const char *debug = secure_getenv("MOKKA_DEBUG");
    Dl_info info;

    config.debug_path = debug && has_debug_category(debug, "path");
    if (root && root[0] == '/') {
        size_t len = strlen(root);
        while (len > 1 && root[len - 1] == '/')
            len--;
        if (len < sizeof config.root) {
            memcpy(config.root, root, len);
            config.root[len] = '\0';
            config.root_len = len;
        } else {
            fprintf(stderr, "mokka-preload: MOKKA_ROOT is longer than PATH_MAX; redirection is off\n");
        }
    } else if (root && root[0]) {
        fprintf(stderr, "mokka-preload: MOKKA_ROOT must be an absolute path, got '%s'; redirection is off\n", root);
    }
    if (dladdr((void *)load_config, &info) && info.dli_fname && strlen(info.dli_fname) < sizeof config.self_path)
        strcpy(config.self_path, info.dli_fname);
    errno = saved;
}

static void ensure_config(void)
{
    pthread_once(&config_once, load_config);
}

__attribute__((constructor)) static void preload_init(void)
{
    ensure_config();
}

/* ==================================================================================
 * Real libc functions
 * ================================================================================== */

static void *get_libc_func(const char *name)
{
    void *fp = dlsym(RTLD_NEXT, name);
#if defined(__x86_64__)
    if (!fp)
        fp = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
#elif defined(__aarch64__)
    if (!fp)
        fp = dlvsym(RTLD_NEXT, name, "GLIBC_2.17");
#endif
    return fp;
}

/* Declares _name, the real function, looked up on first use. */
#define libc_func(name, rettype, ...)                                                                   \
    static rettype (*_##name)(__VA_ARGS__) = NULL;                                                      \
    if (__atomic_load_n(&_##name, __ATOMIC_ACQUIRE) == NULL) {                                          \
        void *fp_ = get_libc_func(#name);                                                               \
        if (fp_ == NULL) {                                                                              \
            fprintf(stderr, "mokka-preload: could not find the libc function %s\n", #name);            \
            abort();                                                                                    \
        }                                                                                               \
        __atomic_store_n(&_##name, (rettype(*)(__VA_ARGS__))fp_, __ATOMIC_RELEASE);                     \
    }

/* ==================================================================================
 * Path resolution: the one choke point
 * ================================================================================== */

static int under(const char *path, const char *prefix, size_t len)
{
    return strncmp(path, prefix, len) == 0 && (path[len] == '/' || path[len] == '\0');
}

static int is_candidate(const char *path)
{
    return under(path, "/sys", 4) || under(path, "/dev", 4) || under(path, "/proc", 5);
}

/* Trees the node owns: always redirected, so an absent surface looks absent. */
static int is_owned(const char *path)
{
    static const struct { const char *prefix; int whole_component; } owned[] = {
        {"/sys/bus/pci", 1},        {"/sys/devices/pci", 0}, {"/sys/module/nvidia", 0},
        {"/sys/class/infiniband", 0}, {"/dev/nvidia", 0},    {"/dev/infiniband", 1},
        {"/proc/driver/nvidia", 0},
    };
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
        size_t len = strlen(owned[i].prefix);
        if (owned[i].whole_component ? under(path, owned[i].prefix, len)
                                     : strncmp(path, owned[i].prefix, len) == 0)
            return 1;
    }
    return 0;
}

/* lstat by raw syscall: the shim's own stat wrappers must not see their own lookups */
static int raw_lstat(const char *path, struct stat *st)
{
#ifdef SYS_newfstatat
    return syscall(SYS_newfstatat, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW) == 0;
#else
    return syscall(SYS_fstatat64, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW) == 0;
#endif
}

static int raw_lstat_is_file(const char *path)
{
    struct stat st;
    return raw_lstat(path, &st) && !S_ISDIR(st.st_mode);
}

static int raw_is_symlink(const char *path)
{
    struct stat st;
    return raw_lstat(path, &st) && S_ISLNK(st.st_mode);
}

/* A `..` after a symlink is resolved by the kernel through the link, so it cannot be resolved by hand:
 * true when `prefix` is a symlink on the host or in the root. */
static int symlink_anywhere(const char *prefix, size_t len)
{
    char rooted[PATH_MAX];
    if (raw_is_symlink(prefix))
        return 1;
    if (config.root_len + len >= sizeof rooted)
        return 1;
    memcpy(rooted, config.root, config.root_len);
    memcpy(rooted + config.root_len, prefix, len + 1);
    return raw_is_symlink(rooted);
}

static int raw_exists(const char *path)
{
    return syscall(SYS_faccessat, AT_FDCWD, path, F_OK) == 0;
}

static int redirection_disabled(void)
{
    char flag[PATH_MAX];
    if (config.root_len + sizeof DISABLE_FILE > sizeof flag)
        return 0;
    memcpy(flag, config.root, config.root_len);
    memcpy(flag + config.root_len, DISABLE_FILE, sizeof DISABLE_FILE);
    return raw_exists(flag);
}

/*
 * The path to use instead of `path` (relative to `dirfd` as in the *at calls): `path`
 * itself, or `buf` (PATH_MAX bytes) holding $MOKKA_ROOT + the absolute path.  NULL with
 * errno ENAMETOOLONG when the rewritten path would not fit.  Leaves errno alone otherwise.
 */
/* The host path for `path`: as given, or its normalised form (copied into buf) when it had one. */
static const char *host_path(const char *path, const char *normalised, char *buf)
{
    if (normalised == NULL)
        return path;
    memmove(buf, normalised, strlen(normalised) + 1);
    return buf;
}

static const char *resolve_path(int dirfd, const char *path, char *buf)
{
    char absolute[PATH_MAX], normal[PATH_MAX];
    const char *p = path;
    int saved = errno;

    ensure_config();
    if (path == NULL || config.root_len == 0)
        return path;
    if (path[0] != '/') {
        /* relative: only matters when the working directory is a real /sys, /dev or /proc one */
        size_t cwd_len, path_len = strlen(path);
        if (dirfd != AT_FDCWD || getcwd(absolute, sizeof absolute) == NULL || !is_candidate(absolute)) {
            errno = saved;
            return path;
        }
        cwd_len = strlen(absolute);
        if (cwd_len + 1 + path_len >= sizeof absolute) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        absolute[cwd_len] = '/';
        memcpy(absolute + cwd_len + 1, path, path_len + 1);
        p = absolute;
    }
    const char *normalised = NULL;
    if ((strstr(p, "/.") || strstr(p, "//")) && fold_path(p, normal, symlink_anywhere))
        p = normalised = normal;
    if (!is_candidate(p) || redirection_disabled()) {
        errno = saved;
        return host_path(path, normalised, buf);
    }
    size_t len = strlen(p);
    if (config.root_len + len >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    memcpy(buf, config.root, config.root_len);
    memcpy(buf + config.root_len, p, len + 1);
    if (!is_owned(p) && !raw_lstat_is_file(buf)) {
        errno = saved;
        return host_path(path, normalised, buf);
    }
    if (config.debug_path)
        fprintf(stderr, "mokka-preload: path %s -> %s\n", path, buf);
    errno = saved;
    return buf;
}

/* A real path under the root, shown to the program as the path it would have on the node. */
static void unroot(char *resolved)
{
    if (resolved && config.root_len && strncmp(resolved, config.root, config.root_len) == 0 &&
        resolved[config.root_len] == '/')
        memmove(resolved, resolved + config.root_len, strlen(resolved + config.root_len) + 1);
}

/* ==================================================================================
 * Carrying the shim across exec: envp plus LD_PRELOAD / MOKKA_ROOT if they went missing.
 * Everything lives on the caller's stack (safe after vfork).
 * ================================================================================== */

static int env_has(char *const envp[], const char *name, const char *must_contain)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return must_contain == NULL || strstr(*e + n + 1, must_contain) != NULL;
    return 0;
}

static size_t env_count(char *const envp[])
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    return n;
}

/* Fills `out` (env_count(envp) + 3 slots) and the two strings; returns out. */
static char **carry_env(char *const envp[], char **out, char *preload, size_t preload_size, char *root,
                        size_t root_size)
{
    size_t k = 0;
    int need_preload, need_root;

    ensure_config();
    need_preload = config.root_len && config.self_path[0] && !env_has(envp, "LD_PRELOAD", config.self_path);
    need_root = config.root_len && !env_has(envp, "MOKKA_ROOT", NULL);
    if (need_preload) {
        const char *old = NULL;
        for (char *const *e = envp; e && *e; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11) == 0)
                old = *e + 11;
        snprintf(preload, preload_size, "LD_PRELOAD=%s%s%s", config.self_path, old && *old ? ":" : "",
                 old ? old : "");
        out[k++] = preload;
    }
    if (need_root) {
        snprintf(root, root_size, "MOKKA_ROOT=%s", config.root);
        out[k++] = root;
    }
    for (char *const *e = envp; e && *e; e++)
        if (!(need_preload && strncmp(*e, "LD_PRELOAD=", 11) == 0))
            out[k++] = *e;
    out[k] = NULL;
    return out;
}

#define WITH_CARRIED_ENV(envp, newenv)                                                                \
    char *newenv##_slots[env_count(envp) + 3];                                                        \
    char newenv##_preload[2 * PATH_MAX + 16], newenv##_root[PATH_MAX + 16];                           \
    char **newenv = carry_env(envp, newenv##_slots, newenv##_preload, sizeof newenv##_preload,        \
                              newenv##_root, sizeof newenv##_root)

/* ==================================================================================
 * Overridden libc wrappers.  Only these are exported (see libmokka-preload.map).
 * ================================================================================== */

#define RESOLVE_OR_FAIL(dirfd, path, failure)                                                          \
    char buf_[PATH_MAX];                                                                               \
    const char *p_ = resolve_path((dirfd), (path), buf_);                                              \
    if (p_ == NULL)                                                                                    \
        return failure

static int needs_mode(int flags)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

#define WRAP_OPEN(name)                                                                                \
    EXPORT int name(const char *path, int flags, ...)                                                  \
    {                                                                                                  \
        mode_t mode = 0;                                                                               \
        if (needs_mode(flags)) {                                                                       \
            va_list ap;                                                                                \
            va_start(ap, flags);                                                                       \
            mode = va_arg(ap, mode_t);                                                                 \
            va_end(ap);                                                                                \
        }                                                                                              \
        libc_func(name, int, const char *, int, ...);                                                  \
        RESOLVE_OR_FAIL(AT_FDCWD, path, -1);                                                           \
        return _##name(p_, flags, mode);                                                               \
    }

#define WRAP_OPENAT(name)                                                                              \
    EXPORT int name(int dirfd, const char *path, int flags, ...)                                       \
    {                                                                                                  \
        mode_t mode = 0;                                                                               \
        if (needs_mode(flags)) {                                                                       \
            va_list ap;                                                                                \
            va_start(ap, flags);                                                                       \
            mode = va_arg(ap, mode_t);                                                                 \
            va_end(ap);                                                                                \
        }                                                                                              \
        libc_func(name, int, int, const char *, int, ...);                                             \
        RESOLVE_OR_FAIL(dirfd, path, -1);                                                              \
        return _##name(dirfd, p_, flags, mode);                                                        \
    }

/* _FORTIFY_SOURCE variants: open() with a flags value the compiler cannot see */
#define WRAP_OPEN2(name)                                                                               \
    EXPORT int name(const char *path, int flags)                                                       \
    {                                                                                                  \
        libc_func(name, int, const char *, int);                                                       \
        RESOLVE_OR_FAIL(AT_FDCWD, path, -1);                                                           \
        return _##name(p_, flags);                                                                     \
    }

#define WRAP_OPENAT2(name)                                                                             \
    EXPORT int name(int dirfd, const char *path, int flags)                                            \
    {                                                                                                  \
        libc_func(name, int, int, const char *, int);                                                  \
        RESOLVE_OR_FAIL(dirfd, path, -1);                                                              \
        return _##name(dirfd, p_, flags);                                                              \
    }

/* f(path, arg): stat, lstat, access, ... */
#define WRAP_PATH_1ARG(name, rettype, failure, argtype)                                                \
    EXPORT rettype name(const char *path, argtype arg)                                                 \
    {                                                                                                  \
        libc_func(name, rettype, const char *, argtype);                                               \
        RESOLVE_OR_FAIL(AT_FDCWD, path, failure);                                                      \
        return _##name(p_, arg);                                                                       \
    }

/* f(dirfd, path, arg, flags): fstatat, faccessat */
#define WRAP_AT_2ARGS(name, argtype)                                                                   \
    EXPORT int name(int dirfd, const char *path, argtype arg, int flags)                               \
    {                                                                                                  \
        libc_func(name, int, int, const char *, argtype, int);                                         \
        RESOLVE_OR_FAIL(dirfd, path, -1);                                                              \
        return _##name(dirfd, p_, arg, flags);                                                         \
    }

/* glibc < 2.33 stat ABI: __xstat(ver, path, buf) */
#define WRAP_VERSTAT(name, buftype)                                                                    \
    EXPORT int name(int ver, const char *path, buftype *st)                                            \
    {                                                                                                  \
        libc_func(name, int, int, const char *, buftype *);                                            \
        RESOLVE_OR_FAIL(AT_FDCWD, path, -1);                                                           \
        return _##name(ver, p_, st);                                                                   \
    }

#define WRAP_VERSTATAT(name, buftype)                                                                  \
    EXPORT int name(int ver, int dirfd, const char *path, buftype *st, int flags)                      \
    {                                                                                                  \
        libc_func(name, int, int, int, const char *, buftype *, int);                                  \
        RESOLVE_OR_FAIL(dirfd, path, -1);                                                              \
        return _##name(ver, dirfd, p_, st, flags);                                                     \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)
WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)
WRAP_OPEN2(__open_2)
WRAP_OPEN2(__open64_2)
WRAP_OPENAT2(__openat_2)
WRAP_OPENAT2(__openat64_2)

WRAP_PATH_1ARG(fopen, FILE *, NULL, const char *)
WRAP_PATH_1ARG(fopen64, FILE *, NULL, const char *)

WRAP_PATH_1ARG(stat, int, -1, struct stat *)
WRAP_PATH_1ARG(lstat, int, -1, struct stat *)
WRAP_PATH_1ARG(stat64, int, -1, struct stat64 *)
WRAP_PATH_1ARG(lstat64, int, -1, struct stat64 *)
WRAP_AT_2ARGS(fstatat, struct stat *)
WRAP_AT_2ARGS(fstatat64, struct stat64 *)
WRAP_VERSTAT(__xstat, struct stat)
WRAP_VERSTAT(__lxstat, struct stat)
WRAP_VERSTAT(__xstat64, struct stat64)
WRAP_VERSTAT(__lxstat64, struct stat64)
WRAP_VERSTATAT(__fxstatat, struct stat)
WRAP_VERSTATAT(__fxstatat64, struct stat64)

WRAP_PATH_1ARG(access, int, -1, int)
WRAP_PATH_1ARG(euidaccess, int, -1, int)
WRAP_PATH_1ARG(eaccess, int, -1, int)
WRAP_AT_2ARGS(faccessat, int)

EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
    libc_func(statx, int, int, const char *, int, unsigned int, struct statx *);
    RESOLVE_OR_FAIL(dirfd, path, -1);
    return _statx(dirfd, p_, flags, mask, stx);
}

/* ls -l asks for ACLs and security labels by path */
EXPORT ssize_t getxattr(const char *path, const char *name, void *value, size_t size)
{
    libc_func(getxattr, ssize_t, const char *, const char *, void *, size_t);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _getxattr(p_, name, value, size);
}

EXPORT ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size)
{
    libc_func(lgetxattr, ssize_t, const char *, const char *, void *, size_t);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _lgetxattr(p_, name, value, size);
}

EXPORT ssize_t listxattr(const char *path, char *list, size_t size)
{
    libc_func(listxattr, ssize_t, const char *, char *, size_t);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _listxattr(p_, list, size);
}

EXPORT ssize_t llistxattr(const char *path, char *list, size_t size)
{
    libc_func(llistxattr, ssize_t, const char *, char *, size_t);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _llistxattr(p_, list, size);
}

EXPORT DIR *opendir(const char *path)
{
    libc_func(opendir, DIR *, const char *);
    RESOLVE_OR_FAIL(AT_FDCWD, path, NULL);
    return _opendir(p_);
}

EXPORT int scandir(const char *path, struct dirent ***list, int (*filter)(const struct dirent *),
                   int (*compar)(const struct dirent **, const struct dirent **))
{
    libc_func(scandir, int, const char *, struct dirent ***, int (*)(const struct dirent *),
              int (*)(const struct dirent **, const struct dirent **));
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _scandir(p_, list, filter, compar);
}

EXPORT int scandir64(const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
                     int (*compar)(const struct dirent64 **, const struct dirent64 **))
{
    libc_func(scandir64, int, const char *, struct dirent64 ***, int (*)(const struct dirent64 *),
              int (*)(const struct dirent64 **, const struct dirent64 **));
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _scandir64(p_, list, filter, compar);
}

EXPORT ssize_t readlink(const char *path, char *out, size_t size)
{
    libc_func(readlink, ssize_t, const char *, char *, size_t);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _readlink(p_, out, size);
}

EXPORT ssize_t readlinkat(int dirfd, const char *path, char *out, size_t size)
{
    libc_func(readlinkat, ssize_t, int, const char *, char *, size_t);
    RESOLVE_OR_FAIL(dirfd, path, -1);
    return _readlinkat(dirfd, p_, out, size);
}

EXPORT char *realpath(const char *path, char *resolved)
{
    char tmp[PATH_MAX];
    libc_func(realpath, char *, const char *, char *);
    RESOLVE_OR_FAIL(AT_FDCWD, path, NULL);
    if (p_ == path)
        return _realpath(path, resolved);
    if (_realpath(p_, tmp) == NULL)
        return NULL;
    unroot(tmp);
    if (resolved == NULL)
        return strdup(tmp);
    strcpy(resolved, tmp);
    return resolved;
}

EXPORT char *canonicalize_file_name(const char *path)
{
    return realpath(path, NULL);
}

EXPORT int chdir(const char *path)
{
    libc_func(chdir, int, const char *);
    RESOLVE_OR_FAIL(AT_FDCWD, path, -1);
    return _chdir(p_);
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    libc_func(execve, int, const char *, char *const[], char *const[]);
    WITH_CARRIED_ENV(envp, env);
    return _execve(path, argv, env);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    libc_func(execvpe, int, const char *, char *const[], char *const[]);
    WITH_CARRIED_ENV(envp, env);
    return _execvpe(file, argv, env);
}

EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    libc_func(posix_spawn, int, pid_t *, const char *, const posix_spawn_file_actions_t *,
              const posix_spawnattr_t *, char *const[], char *const[]);
    WITH_CARRIED_ENV(envp, env);
    return _posix_spawn(pid, path, actions, attr, argv, env);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    libc_func(posix_spawnp, int, pid_t *, const char *, const posix_spawn_file_actions_t *,
              const posix_spawnattr_t *, char *const[], char *const[]);
    WITH_CARRIED_ENV(envp, env);
    return _posix_spawnp(pid, file, actions, attr, argv, env);
}

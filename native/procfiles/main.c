/* mokka-proc-files: how `mokka run` shows a /proc file the running kernel lacks (mokka_core.run.command).
 *
 *   mokka-proc-files PATH=FILE [PATH=FILE...] -- PROGRAM [ARGS...]
 *
 * procfs cannot gain a name, and no mount can add one: a kernel built without module support has no
 * /proc/modules, so lsmod, NFD and nvidia-mig-parted would find no driver loaded.  PROGRAM, and everything it
 * starts, therefore runs under a seccomp filter that hands each read-only open(2)/openat(2) to a supervisor
 * (seccomp user notification): an open of a PATH gets a descriptor of FILE, put into the caller by the
 * supervisor (SECCOMP_IOCTL_NOTIF_ADDFD); every other open goes on in the kernel untouched.  It reaches
 * static programs (Go) too, which no preload shim does.  FILE is opened at each open: what the node re-stages
 * shows at once.
 *
 * PATH (as given: /proc/modules) is matched after the caller's relative path is joined to its directory (cwd or
 * dirfd) and folded as the kernel walks it (common/path.h, through symlinks where a `..` follows one);
 * openat2(2) is not looked at (no reader of these files uses it).  Opens for writing, of directories and
 * O_PATH ones never leave the kernel.
 *
 * The supervisor runs in a session of its own (a terminal's signals never reach it), holds none of PROGRAM's
 * descriptors, and exits once no process under the filter is left.  On a kernel that refuses the filter
 * (before 5.9), PROGRAM runs without it after one line on stderr.
 *
 * Exit status: PROGRAM's (it is exec'd in place); 125 wrong usage, 126 PROGRAM cannot run, 127 not found;
 * each with one line on stderr (the last two as `mokka run` words them).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "path.h"

enum { EXIT_USAGE = 125, EXIT_CANNOT_EXEC = 126, EXIT_NOT_FOUND = 127, MAX_FILES = 16 };

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "mokka-proc-files: add this architecture's AUDIT_ARCH"
#endif

#ifndef SECCOMP_ADDFD_FLAG_SEND
#define SECCOMP_ADDFD_FLAG_SEND (1UL << 1)
#endif
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS  /* Linux 6.6 (Debian 12's headers are 6.1's) */
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

struct shown {
    const char *path;  /* as the caller names it: /proc/modules */
    const char *file;  /* what it gets */
};

static struct shown shown[MAX_FILES];
static int shown_count;

static long seccomp(unsigned op, unsigned flags, void *args)
{
    return syscall(SYS_seccomp, op, flags, args);
}

/* Opens that may read a file: not for writing, creating or truncating, not a directory, not O_PATH. */
#define NOT_READ_ONLY (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_DIRECTORY | O_PATH)
#define ARG_LOW(n) (offsetof(struct seccomp_data, args) + 8 * (n))  /* little-endian: the flags' word */

static int install_filter(void)
{
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 1),
        BPF_JUMP(BPF_JMP | BPF_JA, 3, 0, 0),  /* to the flags of openat */
#ifdef __NR_open
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_open, 0, 5),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(1)),
        BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
#else
        BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0),  /* no open(2) here: allow */
        BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0),
        BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0),
#endif
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LOW(2)),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, NOT_READ_ONLY, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    long listener = seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0 && errno == EACCES) {  /* without CAP_SYS_ADMIN the kernel asks for no_new_privs */
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        listener = seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    }
    return (int)listener;
}

/* The NUL-terminated string at addr in pid's memory, read a page at a time (the string may end at the edge
 * of its mapping): process_vm_readv(2), one call for a path within a page; /proc/PID/mem on a kernel
 * without cross-memory attach. */
static int read_string(pid_t pid, uint64_t addr, char *out, size_t size)
{
    int mem = -1;
    size_t have = 0;
    int ret = -1;
    while (have < size) {
        size_t chunk = 4096 - (size_t)((addr + have) % 4096);
        if (chunk > size - have)
            chunk = size - have;
        struct iovec local = {.iov_base = out + have, .iov_len = chunk};
        struct iovec remote = {.iov_base = (void *)(uintptr_t)(addr + have), .iov_len = chunk};
        ssize_t got = mem < 0 ? process_vm_readv(pid, &local, 1, &remote, 1, 0) : -1;
        if (got < 0 && errno == ENOSYS) {
            char mem_path[64];
            snprintf(mem_path, sizeof mem_path, "/proc/%d/mem", (int)pid);
            if (mem < 0 && (mem = open(mem_path, O_RDONLY | O_CLOEXEC)) < 0)
                break;
        }
        if (mem >= 0)
            got = pread(mem, out + have, chunk, (off_t)(addr + have));
        if (got <= 0)
            break;
        char *end = memchr(out + have, '\0', (size_t)got);
        have += (size_t)got;
        if (end) {
            ret = 0;
            break;
        }
    }
    if (mem >= 0)
        close(mem);
    return ret;
}

/* In the supervisor's view, which is the caller's (same mount namespace): a `..` after a symlink is not folded. */
static int is_symlink(const char *prefix, size_t len)
{
    (void)len;
    struct stat st;
    return lstat(prefix, &st) == 0 && S_ISLNK(st.st_mode);
}

/* The absolute path the caller opens, folded (path.h): relative ones joined to its cwd or to the directory
 * dirfd names. */
static int caller_path(pid_t pid, int dirfd, const char *name, char *out)
{
    char joined[PATH_MAX];
    if (name[0] == '/') {
        if (strlen(name) >= sizeof joined)
            return -1;
        strcpy(joined, name);
    } else {
        char link[64];
        if (dirfd == AT_FDCWD)
            snprintf(link, sizeof link, "/proc/%d/cwd", (int)pid);
        else
            snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)pid, dirfd);
        ssize_t len = readlink(link, joined, sizeof joined - 1);
        if (len <= 0 || (size_t)len + 1 + strlen(name) + 1 > sizeof joined)
            return -1;
        joined[len] = '/';
        strcpy(joined + len + 1, name);
    }
    if (fold_path(joined, out, is_symlink))
        return 0;
    /* a `..` after a symlink (/proc/self/../modules): the kernel goes through the link, so does realpath(3)
     * of the directory; the links of /proc/self point into /proc for the supervisor as for the caller */
    char *slash = strrchr(joined, '/'), dir[PATH_MAX];
    *slash = '\0';
    if (!realpath(joined[0] ? joined : "/", dir))
        return -1;
    size_t dir_len = strcmp(dir, "/") ? strlen(dir) : 0, base_len = strlen(slash + 1);
    if (dir_len + base_len + 2 > PATH_MAX)
        return -1;
    memcpy(out, dir, dir_len);
    out[dir_len] = '/';
    memcpy(out + dir_len + 1, slash + 1, base_len + 1);
    return 0;
}

static const struct shown *shown_for(const char *path)
{
    for (int i = 0; i < shown_count; i++)
        if (strcmp(shown[i].path, path) == 0)
            return &shown[i];
    return NULL;
}

/* Put a descriptor of what is shown into the caller as its open's result; 0 done, -1 let the kernel answer. */
static int give(int listener, const struct seccomp_notif *req, const struct shown *what, unsigned flags)
{
    uint64_t id = req->id;
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) != 0)  /* the memory read was of the right caller */
        return -1;
    int fd = open(what->file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct seccomp_notif_addfd add = {
        .id = req->id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = (uint32_t)fd,
        .newfd_flags = flags & O_CLOEXEC,
    };
    int ret = ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
    if (ret < 0 && errno == EINVAL) {  /* before 5.14: add, then answer with the number */
        add.flags = 0;
        int newfd = ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
        struct seccomp_notif_resp resp = {.id = req->id, .val = newfd};
        ret = newfd < 0 ? -1 : ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
    }
    close(fd);
    return ret < 0 && errno != ENOENT ? -1 : 0;  /* ENOENT: the caller is gone (a signal): nothing to answer */
}

static void answer(int listener, struct seccomp_notif *req)
{
    const struct seccomp_data *call = &req->data;
    int is_openat = call->nr == __NR_openat;
    int dirfd = is_openat ? (int)call->args[0] : AT_FDCWD;
    uint64_t name_at = call->args[is_openat ? 1 : 0];
    unsigned flags = (unsigned)call->args[is_openat ? 2 : 1];
    char name[PATH_MAX], path[PATH_MAX];
    const struct shown *what = NULL;
    if (read_string((pid_t)req->pid, name_at, name, sizeof name) == 0 && name[0] &&
        caller_path((pid_t)req->pid, dirfd, name, path) == 0)
        what = shown_for(path);
    if (what && give(listener, req, what, flags) == 0)
        return;
    struct seccomp_notif_resp resp = {.id = req->id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
}

/* Whether no process under the filter is left (the listener then polls POLLHUP). */
static int orphaned(int listener)
{
    struct pollfd ready = {.fd = listener, .events = POLLIN};
    return poll(&ready, 1, 0) == 1 && !(ready.revents & POLLIN) && (ready.revents & (POLLHUP | POLLERR));
}

/* Since 6.6 the kernel can switch from the caller straight to a supervisor blocked in RECV, on the caller's CPU
 * (SYNC_WAKE_UP): each open costs a few microseconds, not a cross-CPU wake-up (in a VM hundreds).  There RECV
 * also returns when the last process under the filter is gone; before 6.6 it never does, so poll waits. */
static void supervise(int listener)
{
    struct seccomp_notif_sizes sizes;
    if (seccomp(SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0)
        return;
    struct seccomp_notif *req = calloc(1, sizes.seccomp_notif > sizeof *req ? sizes.seccomp_notif : sizeof *req);
    if (!req)
        return;
    int blocking = ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) == 0;
    for (;;) {
        if (!blocking) {
            struct pollfd ready = {.fd = listener, .events = POLLIN};
            if (poll(&ready, 1, -1) < 0) {
                if (errno == EINTR)
                    continue;
                return;
            }
            if (!(ready.revents & POLLIN))  /* POLLHUP: no process under the filter is left */
                return;
        }
        memset(req, 0, sizes.seccomp_notif);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) {
            if (errno == EINTR || (errno == ENOENT && !(blocking && orphaned(listener))))
                continue;  /* ENOENT: the caller went away meanwhile, or (blocking) the filter lost its last user */
            return;
        }
        answer(listener, req);
    }
}

static int receive_fd(int sock)
{
    char data;
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {.iov_base = &data, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
        return -1;
    struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
    if (!header || header->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(header), sizeof fd);
    return fd;
}

static void send_fd(int sock, int fd)
{
    char data = 'l';
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {.iov_base = &data, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                         .msg_controllen = sizeof control.space};
    struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof fd);
    sendmsg(sock, &msg, MSG_NOSIGNAL);
}

/* Close every descriptor from 3 on but keep (close_range(2) since 5.9, else the first thousand). */
static void close_all_but(int keep)
{
    if ((keep == 3 || syscall(SYS_close_range, 3, keep - 1, 0) == 0) &&
        syscall(SYS_close_range, keep + 1, ~0U, 0) == 0)
        return;
    for (int fd = 3; fd < 1024; fd++)
        if (fd != keep)
            close(fd);
}

/* The supervisor: a grandchild in a session of its own, so it is nobody's child to wait for and no terminal
 * signal reaches it; it keeps nothing of the caller's open. */
static void start_supervisor(int sock)
{
    pid_t middle = fork();
    if (middle != 0) {
        if (middle > 0)
            waitpid(middle, NULL, 0);
        return;
    }
    setsid();
    if (fork() != 0)
        _exit(0);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null >= 0; fd++)
        dup2(null, fd);
    close_all_but(sock);
    int listener = receive_fd(sock);
    close(sock);
    if (listener >= 0)
        supervise(listener);
    _exit(0);
}

static int fail(int status, const char *who, const char *what, const char *detail)
{
    fprintf(stderr, "%s: %s%s%s\n", who, what, detail ? ": " : "", detail ? detail : "");
    return status;
}

int main(int argc, char **argv)
{
    const char *self = "mokka-proc-files";
    int dashes = 1;
    while (dashes < argc && strcmp(argv[dashes], "--") != 0)
        dashes++;
    if (dashes >= argc - 1 || dashes == 1 || dashes - 1 > MAX_FILES)
        return fail(EXIT_USAGE, self, "usage: mokka-proc-files PATH=FILE [PATH=FILE...] -- PROGRAM [ARGS...]", NULL);
    for (int i = 1; i < dashes; i++) {
        char *equals = strchr(argv[i], '=');
        if (argv[i][0] != '/' || !equals || equals[1] != '/')
            return fail(EXIT_USAGE, self, "PATH=FILE, both absolute, expected; got", argv[i]);
        *equals = '\0';
        shown[shown_count++] = (struct shown){.path = argv[i], .file = equals + 1};
    }

    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
        return fail(EXIT_CANNOT_EXEC, self, "cannot start the supervisor", strerror(errno));
    start_supervisor(pair[1]);
    close(pair[1]);
    int listener = install_filter();
    if (listener < 0) {
        fprintf(stderr, "%s: this kernel refuses seccomp user notification (%s): %s stays absent\n", self,
                strerror(errno), shown[0].path);
    } else {
        send_fd(pair[0], listener);
        close(listener);
    }
    close(pair[0]);  /* without a descriptor sent the supervisor exits */

    char **program = argv + dashes + 1;
    execvp(program[0], program);
    /* as mokka run says it when it execs CMD itself */
    if (errno == ENOENT)
        return fail(EXIT_NOT_FOUND, "mokka", program[0], "command not found");
    return fail(EXIT_CANNOT_EXEC, "mokka", program[0], strerror(errno));
}

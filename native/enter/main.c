/* mokka-enter: how Mokka starts a node's service (mokka_core.run.services).
 *
 *   mokka-enter PARENT [NSPID USERNS] -- PROGRAM [ARGS...]
 *
 * Ties the service to PARENT (SIGTERM when PARENT dies, even by SIGKILL: PR_SET_PDEATHSIG; PARENT must be
 * the process that started this one), empties the signal mask (the starter may hold SIGTERM & co.), enters
 * the mount namespace of NSPID where given (first its user namespace, where USERNS is 1), then execs
 * PROGRAM, searched in PATH.  A program of its own so that Python starts services with vfork (subprocess
 * without preexec_fn): a fork of the starter and Python code between fork and exec cost ten times more.
 *
 * Exit status: 125 wrong usage, 126 the service could not be tied or placed, 127 PROGRAM could not run;
 * each with one line on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

enum { EXIT_USAGE = 125, EXIT_SETUP = 126, EXIT_EXEC = 127 };

static int fail(int status, const char *what, const char *detail)
{
    fprintf(stderr, "mokka-enter: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return status;
}

static int parse_pid(const char *text, pid_t *pid)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || end == text || *end || value <= 0 || value > 0x3fffffff)
        return -1;
    *pid = (pid_t)value;
    return 0;
}

static int join(pid_t pid, const char *kind, int flag)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, kind);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int ret = setns(fd, flag);
    int saved = errno;
    close(fd);
    errno = saved;
    return ret;
}

int main(int argc, char **argv)
{
    int dashes = 1;
    while (dashes < argc && strcmp(argv[dashes], "--") != 0)
        dashes++;
    pid_t parent, nspid = 0;
    int given = dashes - 1;
    if (dashes >= argc - 1 || (given != 1 && given != 3) || parse_pid(argv[1], &parent) < 0 ||
        (given == 3 && (parse_pid(argv[2], &nspid) < 0 || (strcmp(argv[3], "0") && strcmp(argv[3], "1")))))
        return fail(EXIT_USAGE, "usage: mokka-enter PARENT [NSPID USERNS] -- PROGRAM [ARGS...]", NULL);

    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0)
        return fail(EXIT_SETUP, "cannot tie the service to its parent (PR_SET_PDEATHSIG)", strerror(errno));
    if (getppid() != parent)  /* it died before the tie: no signal will ever come */
        return fail(EXIT_SETUP, "the parent is gone", NULL);
    if (nspid && strcmp(argv[3], "1") == 0 && join(nspid, "user", CLONE_NEWUSER) != 0)
        return fail(EXIT_SETUP, "cannot enter the user namespace of the node's command", strerror(errno));
    if (nspid && join(nspid, "mnt", CLONE_NEWNS) != 0)
        return fail(EXIT_SETUP, "cannot enter the mount namespace of the node's command", strerror(errno));

    char **program = argv + dashes + 1;
    execvp(program[0], program);
    return fail(EXIT_EXEC, program[0], strerror(errno));
}

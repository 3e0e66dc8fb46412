/* execve with an environment that lost LD_PRELOAD and MOKKA_ROOT, and execvp after clearenv():
   the shim puts them back, so the new program still sees the node. */
#include <fcntl.h>
#include <sys/wait.h>
#include <stdlib.h>
#include "snip.h"

extern char **environ;

int main(int argc, char **argv)
{
    char buf[256];
    if (argc > 1) {
        int fd = open("/proc/driver/nvidia/version", O_RDONLY);
        show(argv[1], "/proc/driver/nvidia/version", fd >= 0, fd >= 0 ? first_line(fd, buf, sizeof buf) : "");
        return 0;
    }
    fflush(stdout);
    if (fork() == 0) {
        char *args[] = {argv[0], "execve", NULL};
        char *env[] = {"PATH=/usr/bin:/bin", NULL};
        execve("/proc/self/exe", args, env);
        _exit(127);
    }
    wait(NULL);
    if (fork() == 0) {
        char self[256];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *args[] = {self, "execvp", NULL};
        clearenv();
        execvp(self, args);
        _exit(127);
    }
    wait(NULL);
    return 0;
}

/* chdir into a redirected directory, then relative paths */
#include <fcntl.h>
#include "snip.h"

int main(void)
{
    char buf[256];
    int rc = chdir(DEV);
    show("chdir", DEV, rc == 0, "ok");
    int fd = open("vendor", O_RDONLY);
    show("open", "vendor", fd >= 0, fd >= 0 ? first_line(fd, buf, sizeof buf) : "");
    return 0;
}

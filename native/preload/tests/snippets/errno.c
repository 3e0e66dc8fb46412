/* The lookup leaves errno alone: a successful call after a failed one keeps the old errno. */
#include <fcntl.h>
#include <sys/stat.h>
#include "snip.h"

int main(void)
{
    struct stat st;
    errno = EILSEQ;
    int rc = stat("/proc/self/status", &st);   /* not in the root: the lookup probes it */
    printf("stat real ok=%d errno=%s\n", rc == 0, errno == EILSEQ ? "kept" : strerror(errno));
    errno = EILSEQ;
    rc = stat(DEV "/vendor", &st);
    printf("stat redirected ok=%d errno=%s\n", rc == 0, errno == EILSEQ ? "kept" : strerror(errno));
    rc = open("/dev/nvidia7", O_RDONLY);
    printf("open missing owned rc=%d errno=%s\n", rc, strerror(errno));
    return 0;
}

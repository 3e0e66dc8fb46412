/* Many threads resolving and opening at once: every read must be the root's content. */
#include <fcntl.h>
#include <pthread.h>
#include "snip.h"

static void *worker(void *arg)
{
    long bad = 0;
    char buf[64];
    for (int i = 0; i < 2000; i++) {
        const char *path = (i & 1) ? DEV "/vendor" : DEV "/device";
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            bad++;
            continue;
        }
        first_line(fd, buf, sizeof buf);
        bad += strcmp(buf, (i & 1) ? "0x10de" : "0x2330") != 0;
        close(fd);
    }
    return (void *)bad;
}

int main(void)
{
    pthread_t t[8];
    long bad = 0;
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    printf("threads: %ld bad reads of 16000\n", bad);
    return 0;
}

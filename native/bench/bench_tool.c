/* Benchmark helper for bench.py.
 *   bench_tool spawn <runs> <cmd> [args]  median wall ms, peak RSS KiB, exit status
 *   bench_tool dlopen <lib> [nvml]        dlopen (+ init, count, shutdown when "nvml")
 *   bench_tool getters <iterations>       ns/call of the hot getters, one "name ns" line each (median of batches)
 *   bench_tool latency <state> <dir> <n>  rename <dir>/t<k>.state over <state>, poll until temperature==k
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*fn0)(void);
typedef int (*fn_u)(unsigned *);
typedef int (*fn_h)(unsigned, void **);
typedef int (*fn_t)(void *, int, unsigned *);
typedef int (*fn_m)(void *, void *);
typedef int (*fn_s)(void *, char *, unsigned);
typedef int (*fn_c)(void *, int, unsigned *);
typedef int (*fn_p)(void *, unsigned *);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "spawn")) {
        /* spawn <runs> cmd...: median wall ms and max peak RSS KiB of the child (a small parent, so
         * ru_maxrss is the child's own) */
        int runs = atoi(argv[2]);
        double *t = calloc((size_t)runs, sizeof(double));
        long rss = 0;
        int rc = 0;
        for (int i = 0; i < runs; i++) {
            double t0 = now();
            pid_t pid = fork();
            if (pid == 0) {
                int fd = open("/dev/null", O_WRONLY);
                dup2(fd, 1);
                dup2(fd, 2);
                execv(argv[3], argv + 3);
                _exit(127);
            }
            int status;
            struct rusage ru;
            wait4(pid, &status, 0, &ru);
            t[i] = (now() - t0) * 1e3;
            if (ru.ru_maxrss > rss) rss = ru.ru_maxrss;
            rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        qsort(t, (size_t)runs, sizeof(double), cmp);
        printf("%.3f %ld %d\n", t[runs / 2], rss, rc);
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "dlopen")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        if (argc >= 4) {
            unsigned n = 0;
            if (((fn0)dlsym(h, "nvmlInit_v2"))() != 0) return 2;
            if (((fn_u)dlsym(h, "nvmlDeviceGetCount_v2"))(&n) != 0 || n == 0) return 3;
            ((fn0)dlsym(h, "nvmlShutdown"))();
        }
        return 0;
    }
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    fn_t temp = (fn_t)dlsym(h, "nvmlDeviceGetTemperature");
    fn_m mem = (fn_m)dlsym(h, "nvmlDeviceGetMemoryInfo");
    void *dev;
    if (((fn0)dlsym(h, "nvmlInit_v2"))() != 0) return 2;
    if (((fn_h)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev) != 0) return 3;
    if (argc >= 3 && !strcmp(argv[1], "getters")) {
        /* device 0 as the state file describes it, device 1 with the dynamic model on (bench.py's state) */
        void *dyn;
        if (((fn_h)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(1, &dyn) != 0) return 3;
        fn_s name = (fn_s)dlsym(h, "nvmlDeviceGetName"), uuid = (fn_s)dlsym(h, "nvmlDeviceGetUUID");
        fn_m mem2 = (fn_m)dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
        fn_c clock = (fn_c)dlsym(h, "nvmlDeviceGetClockInfo");
        fn_p power = (fn_p)dlsym(h, "nvmlDeviceGetPowerUsage");
        long iters = atol(argv[2]);
        enum { BATCHES = 301, N = 8 }; /* short batches: a preempted batch does not move the median */
        static const char *const what[N] = {"temperature", "memory", "name", "uuid", "memory_v2", "clock", "power",
                                            "temperature_dynamic"};
        static double t[N][BATCHES];
        unsigned v;
        char buf[96];
        struct { unsigned version; unsigned long long total, reserved, free, used; } m2 = {0x02000028u, 0, 0, 0, 0};
        unsigned long long mi[3];
        /* a call that fails would time an error path: check each answers once */
        if (temp(dev, 0, &v) || mem(dev, mi) || name(dev, buf, sizeof buf) || uuid(dev, buf, sizeof buf) ||
            mem2(dev, &m2) || clock(dev, 0, &v) || power(dev, &v) || temp(dyn, 0, &v))
            return 4;
        for (int b = 0; b < BATCHES; b++) {
            double t0 = now();
#define TIME(k, call)                                   \
    do {                                                \
        for (long i = 0; i < iters; i++) call;          \
        double t1 = now();                              \
        t[k][b] = (t1 - t0) / iters * 1e9;              \
        t0 = t1;                                        \
    } while (0)
            TIME(0, temp(dev, 0, &v));
            TIME(1, mem(dev, mi));
            TIME(2, name(dev, buf, sizeof buf));
            TIME(3, uuid(dev, buf, sizeof buf));
            TIME(4, mem2(dev, &m2));
            TIME(5, clock(dev, 0, &v));
            TIME(6, power(dev, &v));
            TIME(7, temp(dyn, 0, &v));
        }
        for (int k = 0; k < N; k++) {
            qsort(t[k], BATCHES, sizeof(double), cmp);
            printf("%s %.2f\n", what[k], t[k][BATCHES / 2]);
        }
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "latency")) {
        int n = atoi(argv[4]);
        double *lat = calloc((size_t)n, sizeof(double));
        char src[4096];
        for (int k = 0; k < n; k++) {
            unsigned v = 0;
            snprintf(src, sizeof src, "%s/t%d.state", argv[3], k);
            struct timespec pause = {0, 3000000};
            nanosleep(&pause, NULL); /* let the previous interval expire: worst case is measured too */
            double t0 = now();
            if (rename(src, argv[2]) != 0) { perror("rename"); return 4; }
            do { temp(dev, 0, &v); } while (v != (unsigned)(100 + k) && now() - t0 < 2);
            lat[k] = (now() - t0) * 1e3;
        }
        qsort(lat, (size_t)n, sizeof(double), cmp);
        printf("%.3f %.3f\n", lat[n / 2], lat[n - 1]);
        return 0;
    }
    return 9;
}

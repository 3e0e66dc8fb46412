/* Benchmark helper for bench.py.
 *   bench_tool spawn <runs> <cmd> [args]  median wall ms, peak RSS KiB, exit status
 *   bench_tool dlopen <lib> [nvml]        dlopen (+ init, count, shutdown when "nvml")
 *   bench_tool getters <iterations> [lib...]  ns/call of the hot getters, one "name ns [ns...]" line each (median
 *                                         of batches; with libs, each library in turn in every batch)
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

/* ---- getters: the hot getters' ns/call, of one library or, interleaved batch by batch, of several ---- */
enum { GETTERS = 8 };
static const char *const getter_names[GETTERS] = {"temperature", "memory", "name", "uuid", "memory_v2", "clock",
                                                  "power", "temperature_dynamic"};
struct lib {
    fn_t temp;
    fn_m mem, mem2;
    fn_s name, uuid;
    fn_t clock;
    fn_p power;
    void *dev, *dyn; /* GPU 0 as profiled, GPU 1 with the dynamic model on (bench.py's state) */
};

/* RTLD_LOCAL: a second library of the same soname, opened by its path, is a copy of its own */
static int open_lib(const char *path, struct lib *l) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    l->temp = (fn_t)dlsym(h, "nvmlDeviceGetTemperature");
    l->mem = (fn_m)dlsym(h, "nvmlDeviceGetMemoryInfo");
    l->mem2 = (fn_m)dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    l->name = (fn_s)dlsym(h, "nvmlDeviceGetName");
    l->uuid = (fn_s)dlsym(h, "nvmlDeviceGetUUID");
    l->clock = (fn_t)dlsym(h, "nvmlDeviceGetClockInfo");
    l->power = (fn_p)dlsym(h, "nvmlDeviceGetPowerUsage");
    fn_h handle = (fn_h)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    if (((fn0)dlsym(h, "nvmlInit_v2"))() != 0 || handle(0, &l->dev) != 0 || handle(1, &l->dyn) != 0) return 2;
    return 0;
}

static struct { unsigned version; unsigned long long total, reserved, free, used; } mem2 = {0x02000028u, 0, 0, 0, 0};

/* `iters` calls of getter k, in a loop of its own (no dispatch inside the timed loop); its status (a getter that
 * fails would time an error path) */
static int call(const struct lib *l, int k, long iters) {
    unsigned v;
    char buf[96];
    unsigned long long mi[3];
    int rc = 0;
#define LOOP(expr) do { for (long i = 0; i < iters; i++) rc |= (expr); } while (0)
    switch (k) {
    case 0: LOOP(l->temp(l->dev, 0, &v)); break;
    case 1: LOOP(l->mem(l->dev, mi)); break;
    case 2: LOOP(l->name(l->dev, buf, sizeof buf)); break;
    case 3: LOOP(l->uuid(l->dev, buf, sizeof buf)); break;
    case 4: LOOP(l->mem2(l->dev, &mem2)); break;
    case 5: LOOP(l->clock(l->dev, 0, &v)); break;
    case 6: LOOP(l->power(l->dev, &v)); break;
    default: LOOP(l->temp(l->dyn, 0, &v)); break;
    }
#undef LOOP
    return rc;
}

/* one line per getter: its name and the median ns/call with each library (the first: libnvidia-ml.so.1 as the
 * loader finds it, then each path given) */
static int getters(long iters, int nextra, char **extra) {
    enum { BATCHES = 301, MAX_LIBS = 4 }; /* short batches: a preempted batch does not move the median */
    static struct lib libs[MAX_LIBS];
    static double t[MAX_LIBS][GETTERS][BATCHES];
    int nlibs = 1 + (nextra < MAX_LIBS - 1 ? nextra : MAX_LIBS - 1);
    for (int j = 0; j < nlibs; j++) {
        int rc = open_lib(j ? extra[j - 1] : "libnvidia-ml.so.1", &libs[j]);
        for (int k = 0; !rc && k < GETTERS; k++) rc = call(&libs[j], k, 1) ? 4 : 0;
        if (rc) return rc;
    }
    for (int b = 0; b < BATCHES; b++)
        for (int k = 0; k < GETTERS; k++)
            for (int j = 0; j < nlibs; j++) {
                double t0 = now();
                call(&libs[j], k, iters);
                t[j][k][b] = (now() - t0) / iters * 1e9;
            }
    for (int k = 0; k < GETTERS; k++) {
        printf("%s", getter_names[k]);
        for (int j = 0; j < nlibs; j++) {
            qsort(t[j][k], BATCHES, sizeof(double), cmp);
            printf(" %.2f", t[j][k][BATCHES / 2]);
        }
        printf("\n");
    }
    return 0;
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
    if (argc >= 3 && !strcmp(argv[1], "getters")) return getters(atol(argv[2]), argc - 3, argv + 3);
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    fn_t temp = (fn_t)dlsym(h, "nvmlDeviceGetTemperature");
    void *dev;
    if (((fn0)dlsym(h, "nvmlInit_v2"))() != 0) return 2;
    if (((fn_h)dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev) != 0) return 3;
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

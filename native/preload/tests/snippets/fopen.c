/* fopen, fopen64 */
#include "snip.h"

static void try(const char *what, const char *path, FILE *f)
{
    char buf[256] = "";
    if (f && fgets(buf, sizeof buf, f))
        buf[strcspn(buf, "\n")] = '\0';
    show(what, path, f != NULL, buf);
    if (f)
        fclose(f);
}

int main(void)
{
    try("fopen", DEV "/vendor", fopen(DEV "/vendor", "r"));
    try("fopen64", "/proc/modules", fopen64("/proc/modules", "re"));
    try("fopen", "/proc/driver/nvidia/version", fopen("/proc/driver/nvidia/version", "r"));
    return 0;
}

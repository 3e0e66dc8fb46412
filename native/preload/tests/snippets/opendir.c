/* opendir, scandir, scandir64 */
#include <dirent.h>
#include <stdlib.h>
#include "snip.h"

static int visible(const struct dirent *d) { return d->d_name[0] != '.'; }
static int visible64(const struct dirent64 *d) { return d->d_name[0] != '.'; }

int main(void)
{
    DIR *dir = opendir("/sys/bus/pci/devices");
    int count = 0;
    char names[512] = "";
    if (dir) {
        for (struct dirent *d; (d = readdir(dir));)
            if (d->d_name[0] != '.') {
                count++;
                strncat(names, d->d_name, sizeof names - strlen(names) - 2);
                strcat(names, " ");
            }
        closedir(dir);
    }
    show("opendir", "/sys/bus/pci/devices", dir != NULL, names);

    struct dirent **list;
    int n = scandir("/proc/driver/nvidia", &list, visible, alphasort);
    names[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(names, list[i]->d_name, sizeof names - strlen(names) - 2);
        strcat(names, " ");
        free(list[i]);
    }
    if (n >= 0)
        free(list);
    show("scandir", "/proc/driver/nvidia", n >= 0, names);

    struct dirent64 **list64;
    n = scandir64("/sys/bus/pci/devices", &list64, visible64, alphasort64);
    names[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(names, list64[i]->d_name, sizeof names - strlen(names) - 2);
        strcat(names, " ");
        free(list64[i]);
    }
    if (n >= 0)
        free(list64);
    show("scandir64", "/sys/bus/pci/devices", n >= 0, names);
    return 0;
}

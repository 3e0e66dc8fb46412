/* A driver library of the simulated node (native/driverlibs/libraries.txt): an ELF shared object with the real
 * library's soname that dlopen loads and that exports nothing of the real one.  A program that looks a function
 * up in it finds none (dlsym NULL), as with a library of another driver branch; nothing here runs. */
#define STUB_EXPORT __attribute__((visibility("default")))

STUB_EXPORT const char mokka_driver_library_stub[] = "mokka: a stand-in for an NVIDIA driver library";

/* setters.c: NVML setters as node-wide state. An NVML area; export_table.c's GPU reset uses it. */
#ifndef MOKKA_SETTERS_H
#define MOKKA_SETTERS_H

#include "util.h"

/* nvidia-smi -r on one GPU: IN_USE while processes use it; else pending modes become current */
nvmlReturn_t mk_reset_gpu(nvmlDevice_t device);

#endif

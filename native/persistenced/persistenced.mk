# The node's NVML state feed (mokka-persistenced): a small C program the gpu surface runs at nvidia-persistenced's
# socket, passing GPU containers' libraries descriptors of the state file.  Included from native/Makefile; also
# works alone:
#   make -C native -f persistenced/persistenced.mk persistenced          build build/mokka-persistenced (beside the
#                                                                        library: build/ is a whole native bundle)
#   make -C native -f persistenced/persistenced.mk persistenced-install  copy it into mokka_core/_native/
# Linked statically (under 1 MB resident, no loader). Depends on gcc and libc (libc.a) only.

PD_BIN := build/mokka-persistenced
PD_SRCS := persistenced/main.c common/service.c
PD_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
CC ?= gcc
PD_CFLAGS := -std=gnu11 -Os -g -static -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -Icommon

.PHONY: persistenced persistenced-install persistenced-clean
persistenced: $(PD_BIN)

$(PD_BIN): $(PD_SRCS) common/service.h persistenced/persistenced.mk
	mkdir -p $(dir $@)
	$(CC) $(PD_CFLAGS) -o $@ $(PD_SRCS)

persistenced-install: persistenced
	mkdir -p $(PD_INSTALL_DIR)
	cp -f $(PD_BIN) $(PD_INSTALL_DIR)/

persistenced-clean:
	rm -f $(PD_BIN)

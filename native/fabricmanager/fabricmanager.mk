# The fake nv-fabricmanager: a small C program the node's supervisord runs (sim-fabricmanager's service).
# Included from native/Makefile; also works alone:
#   make -C native -f fabricmanager/fabricmanager.mk fabricmanager          build build/nv-fabricmanager (beside the
#                                                                           library: build/ is a whole native bundle)
#   make -C native -f fabricmanager/fabricmanager.mk fabricmanager-install  copy it into mokka_core/_native/
# Linked statically (under 1 MB resident, no loader). Depends on gcc, libc (libc.a) and python3 (the node paths come from mokka-core's source: fabricmanager/gen_paths.py).

FM_B ?= build/fabricmanager
FM_BIN := build/nv-fabricmanager
FM_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
FM_PATH_SOURCES := ../packages/mokka-core/src/mokka_core/stage/layout.py ../packages/mokka-core/src/mokka_core/stage/paths.py
PYTHON ?= python3
CC ?= gcc
FM_CFLAGS := -std=gnu11 -Os -g -static -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -I$(FM_B) -Icommon

.PHONY: fabricmanager fabricmanager-install fabricmanager-clean
fabricmanager: $(FM_BIN)

$(FM_B)/fm_paths.h: fabricmanager/gen_paths.py $(FM_PATH_SOURCES)
	$(PYTHON) fabricmanager/gen_paths.py $@

$(FM_BIN): fabricmanager/nv-fabricmanager.c common/service.c common/service.h $(FM_B)/fm_paths.h fabricmanager/fabricmanager.mk
	$(CC) $(FM_CFLAGS) -o $@ fabricmanager/nv-fabricmanager.c common/service.c -lm

fabricmanager-install: fabricmanager
	mkdir -p $(FM_INSTALL_DIR)
	cp -f $(FM_BIN) $(FM_INSTALL_DIR)/

fabricmanager-clean:
	rm -rf $(FM_B) $(FM_BIN)

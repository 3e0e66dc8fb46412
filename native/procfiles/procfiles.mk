# mokka-proc-files: how `mokka run` shows a /proc file the running kernel lacks (procfiles/main.c says how).
# Included from native/Makefile; also works alone:
#   make -C native -f procfiles/procfiles.mk procfiles          build build/mokka-proc-files (beside the library:
#                                                              build/ is a whole native bundle)
#   make -C native -f procfiles/procfiles.mk procfiles-install  copy it into mokka_core/_native/
# Linked statically, as mokka-enter. Depends on gcc, libc (libc.a) and the kernel's UAPI headers only.

PROCFILES_BIN := build/mokka-proc-files
PROCFILES_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
CC ?= gcc
PROCFILES_CFLAGS := -std=gnu11 -Os -g -static -Wall -Wextra -D_GNU_SOURCE -Icommon

.PHONY: procfiles procfiles-install procfiles-clean
procfiles: $(PROCFILES_BIN)

$(PROCFILES_BIN): procfiles/main.c common/path.c common/path.h procfiles/procfiles.mk
	mkdir -p $(dir $@)
	$(CC) $(PROCFILES_CFLAGS) -o $@ procfiles/main.c common/path.c

procfiles-install: procfiles
	mkdir -p $(PROCFILES_INSTALL_DIR)
	cp -f $(PROCFILES_BIN) $(PROCFILES_INSTALL_DIR)/

procfiles-clean:
	rm -f $(PROCFILES_BIN)

# The node's /dev/kmsg service (mokka-kmsg): a small C program speaking the FUSE kernel protocol on
# /dev/fuse (no libfuse).  Included from native/Makefile; also works alone:
#   make -C native -f kmsg/kmsg.mk kmsg           build build/mokka-kmsg (beside the library: build/ is a whole
#                                                 native bundle, as MOKKA_NATIVE_DIR takes one)
#   make -C native -f kmsg/kmsg.mk kmsg-install   copy it into mokka_core/_native/, beside the library
# Depends on gcc, libc and the kernel's UAPI headers (linux/fuse.h, Debian's linux-libc-dev) only.

KMSG_BIN := build/mokka-kmsg
KMSG_SRCS := kmsg/main.c kmsg/server.c kmsg/forward.c kmsg/log.c kmsg/util.c common/service.c
KMSG_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
KMSG_CFLAGS := -std=gnu11 -Os -g -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -Icommon

.PHONY: kmsg kmsg-install kmsg-clean
kmsg: $(KMSG_BIN)

$(KMSG_BIN): $(KMSG_SRCS) kmsg/kmsg.h common/service.h
	mkdir -p $(dir $@)
	$(CC) $(KMSG_CFLAGS) -o $@ $(KMSG_SRCS)

kmsg-install: kmsg
	mkdir -p $(KMSG_INSTALL_DIR)
	cp -f $(KMSG_BIN) $(KMSG_INSTALL_DIR)/

kmsg-clean:
	rm -f $(KMSG_BIN)

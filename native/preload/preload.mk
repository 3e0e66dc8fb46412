# The LD_PRELOAD path shim (libmokka-preload.so) and its exec wrapper.
# Included from native/Makefile; also works alone:
#   make -C native -f preload/preload.mk preload          build build/preload/libmokka-preload.so
#   make -C native -f preload/preload.mk preload-install  copy it and the wrapper into mokka_core/_native/
#   make -C native -f preload/preload.mk preload-test     snippet + export tests (pytest)
# Depends on gcc and libc only (and common/path.c, shared with mokka-proc-files).

PRELOAD_B ?= build/preload
PRELOAD_SO := $(PRELOAD_B)/libmokka-preload.so
PRELOAD_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
PYTHON ?= python3
PRELOAD_CFLAGS := -std=gnu11 -fPIC -fvisibility=hidden -O2 -g -Wall -Wextra -Wno-unused-parameter \
	-U_FORTIFY_SOURCE -D_GNU_SOURCE -Icommon
PRELOAD_LDFLAGS := -shared -Wl,--version-script=preload/libmokka-preload.map -Wl,-z,now -Wl,--no-undefined

.PHONY: preload preload-install preload-test preload-clean
preload: $(PRELOAD_SO)

$(PRELOAD_SO): preload/libmokka-preload.c common/path.c common/path.h preload/libmokka-preload.map
	mkdir -p $(PRELOAD_B)
	$(CC) $(PRELOAD_CFLAGS) $(PRELOAD_LDFLAGS) -o $@ preload/libmokka-preload.c common/path.c -ldl -lpthread

preload-install: preload
	mkdir -p $(PRELOAD_INSTALL_DIR)
	cp -f $(PRELOAD_SO) $(PRELOAD_INSTALL_DIR)/
	cp -f tools/mokka-preload-wrapper $(PRELOAD_INSTALL_DIR)/

preload-test: preload
	$(PYTHON) -m pytest -q preload/tests

preload-clean:
	rm -rf $(PRELOAD_B)

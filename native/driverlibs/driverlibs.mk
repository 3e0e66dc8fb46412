# The driver package's other libraries (libcuda, libnvidia-ptxjitcompiler, ...): one stub per line of
# driverlibs/libraries.txt, each with its real soname, no libc (nothing in it runs).  Included from native/Makefile;
# also works alone:
#   make -C native -f driverlibs/driverlibs.mk driverlibs          build build/driver-libs/<library>
#   make -C native -f driverlibs/driverlibs.mk driverlibs-install  copy them and the table into mokka_core/_native/driver-libs/

DL_TABLE := driverlibs/libraries.txt
DL_DIR := build/driver-libs
DL_NAMES := $(shell awk '!/^\#/ && NF {print $$1}' $(DL_TABLE))
DL_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native/driver-libs
CC ?= gcc
# the soname of a library whose soname is its versioned name, until staging writes the node's version over it
DL_VERSION_SLOT := VERSION_SLOT_OF_THE_DRIVER_VERSION_XXXXX
DL_CFLAGS := -std=gnu11 -Os -fPIC -fvisibility=hidden -Wall -Wextra -shared -nostdlib -Wl,-z,noexecstack

.PHONY: driverlibs driverlibs-install driverlibs-clean
driverlibs: $(DL_NAMES:%=$(DL_DIR)/%)

$(DL_DIR)/%: driverlibs/stub.c $(DL_TABLE) driverlibs/driverlibs.mk
	mkdir -p $(DL_DIR)
	$(CC) $(DL_CFLAGS) -o $@ driverlibs/stub.c \
		-Wl,-soname,$(shell awk -v n=$* -v slot=$(DL_VERSION_SLOT) '$$1 == n {print ($$2 == "-" ? n "." slot : $$2)}' $(DL_TABLE))

driverlibs-install: driverlibs
	mkdir -p $(DL_INSTALL_DIR)
	cp -f $(DL_NAMES:%=$(DL_DIR)/%) $(DL_TABLE) $(DL_INSTALL_DIR)/

driverlibs-clean:
	rm -rf $(DL_DIR)

# mokka-enter: the launcher every service Mokka starts itself goes through (enter/main.c says why).
# Included from native/Makefile; also works alone:
#   make -C native -f enter/enter.mk enter          build build/mokka-enter (beside the library: build/ is a
#                                                  whole native bundle)
#   make -C native -f enter/enter.mk enter-install  copy it into mokka_core/_native/
# Linked statically (no loader: it runs before every service). Depends on gcc and libc (libc.a) only.

ENTER_BIN := build/mokka-enter
ENTER_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
CC ?= gcc
ENTER_CFLAGS := -std=gnu11 -Os -g -static -Wall -Wextra -D_GNU_SOURCE

.PHONY: enter enter-install enter-clean
enter: $(ENTER_BIN)

$(ENTER_BIN): enter/main.c enter/enter.mk
	mkdir -p $(dir $@)
	$(CC) $(ENTER_CFLAGS) -o $@ enter/main.c

enter-install: enter
	mkdir -p $(ENTER_INSTALL_DIR)
	cp -f $(ENTER_BIN) $(ENTER_INSTALL_DIR)/

enter-clean:
	rm -f $(ENTER_BIN)

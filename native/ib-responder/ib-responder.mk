# The MAD responder of a simulated node's HCAs (mokka-ib-responder): a small C program sim-ib's surface runs
# (packages/sim-ib/README.md "Serving").  Included from native/Makefile; also works alone:
#   make -C native -f ib-responder/ib-responder.mk ib-responder          build build/mokka-ib-responder (beside the
#                                                                        library: build/ is a whole native bundle)
#   make -C native -f ib-responder/ib-responder.mk ib-responder-install  copy it into mokka_core/_native/
#   make -C native -f ib-responder/ib-responder.mk ib-responder-asan     ASan+UBSan build in build/asan/ (run sim-ib's
#                                                                        tests with MOKKA_NATIVE_DIR=native/build/asan)
#   make -C native -f ib-responder/ib-responder.mk ib-responder-fuzz     the node file's and the JSON reader under
#                                                                        ASan+UBSan: IBR_FUZZ_RUNS mutated inputs (gcc)
# Linked statically (under 1 MB resident, no loader). Depends on gcc and libc (libc.a) only.

IBR_BIN := build/mokka-ib-responder
IBR_SRCS := ib-responder/main.c ib-responder/shim.c ib-responder/mad.c ib-responder/switch.c ib-responder/fabric.c ib-responder/peers.c ib-responder/node.c ib-responder/json.c \
	ib-responder/util.c common/service.c
IBR_INSTALL_DIR ?= ../packages/mokka-core/src/mokka_core/_native
CC ?= gcc
IBR_CFLAGS := -std=gnu11 -Os -g -static -Wall -Wextra -D_GNU_SOURCE -Icommon

IBR_ASAN_FLAGS := -std=gnu11 -O1 -g -Wall -Wextra -D_GNU_SOURCE -Icommon -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined

.PHONY: ib-responder ib-responder-install ib-responder-clean ib-responder-asan ib-responder-fuzz
ib-responder: $(IBR_BIN)

$(IBR_BIN): $(IBR_SRCS) ib-responder/responder.h common/service.h ib-responder/ib-responder.mk
	mkdir -p $(dir $@)
	$(CC) $(IBR_CFLAGS) -o $@ $(IBR_SRCS)

ib-responder-asan: $(IBR_SRCS) ib-responder/responder.h
	mkdir -p build/asan
	$(CC) $(IBR_ASAN_FLAGS) -o build/asan/mokka-ib-responder $(IBR_SRCS)

IBR_FUZZ_SRCS := ib-responder/fuzz.c ib-responder/node.c ib-responder/json.c ib-responder/util.c common/service.c
IBR_FUZZ_SEEDS := $(wildcard ../packages/sim-ib/tests/golden/*.conf) $(wildcard ib-responder/seeds/*)
IBR_FUZZ_RUNS ?= 100000
build/asan/ib-responder-fuzz: $(IBR_FUZZ_SRCS) ib-responder/responder.h
	mkdir -p build/asan
	$(CC) $(IBR_ASAN_FLAGS) -DMOKKA_STANDALONE_FUZZ -o $@ $(IBR_FUZZ_SRCS)
ib-responder-fuzz: build/asan/ib-responder-fuzz
	IBR_FUZZ_RUNS=$(IBR_FUZZ_RUNS) build/asan/ib-responder-fuzz $(IBR_FUZZ_SEEDS)

ib-responder-install: ib-responder
	mkdir -p $(IBR_INSTALL_DIR)
	cp -f $(IBR_BIN) $(IBR_INSTALL_DIR)/

ib-responder-clean:
	rm -f $(IBR_BIN) build/asan/mokka-ib-responder build/asan/ib-responder-fuzz

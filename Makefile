# Makefile - loaderd. On a fresh Debian machine `make test` and `make demo` are all anyone types:
# the first compile runs scripts/deps.sh, which installs missing Debian packages.
#
# Knobs: V=1 (echo commands), SAN=address,undefined (sanitizer build, in build/san unless BUILD
# is given), WERROR=1 (default on when CI=true), CUDA_HOME (default: from nvcc on PATH),
# FUZZ_SECONDS (per fuzz target in `make test`, default 10).
# Targets: all, test, test-unit, test-san, test-tsan, test-gpu, fuzz, coverage, demo, check, clean,
# install, uninstall
# (PREFIX=/usr/local, DESTDIR: scripts/module.mk).

CC ?= cc
CFLAGS ?= -O2 -g
SAN ?=
ifneq ($(SAN),)
BUILD ?= build/san
else
BUILD ?= build
endif
FUZZ_SECONDS ?= 10

ifeq ($(V),1)
Q :=
else
Q := @
endif

override CPPFLAGS += -I. -D_GNU_SOURCE
override CFLAGS += -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes -MMD -MP -pthread
override LDFLAGS += -pthread
ifneq ($(SAN),)
override CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
override LDFLAGS += -fsanitize=$(SAN)
endif
ifneq ($(filter true 1,$(CI) $(WERROR)),)
override CFLAGS += -Werror
endif

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null))
NVCC := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc)

SYSLIBS := -luring -lturbojpeg -ljpeg -lpng16 -lwebp -ltiff -lzstd -lxxhash -ljson-c -lm

DEPS_STAMP := $(BUILD)/.deps-ok
LIBS :=
BINS :=
TESTS :=
DEPFILES :=

.PHONY: all test test-unit test-san test-tsan test-gpu fuzz demo check clean
all:

include common/module.mk
include formats/module.mk
include shm/module.mk
include codec/module.mk
include s3/module.mk
include loader/module.mk
include trainer/module.mk
include tools/module.mk
include tests/module.mk
include scripts/module.mk

# Link order: dependents first.
LINKLIBS := $(filter %/libs3.a,$(LIBS)) $(filter %/libloader.a,$(LIBS)) $(filter %/libcodec.a,$(LIBS)) \
	$(filter %/libshm.a,$(LIBS)) $(filter %/libformats.a,$(LIBS)) $(filter %/libcommon.a,$(LIBS))

all: $(BINS) $(TESTS)

$(DEPS_STAMP): scripts/deps.sh
	$(Q)mkdir -p $(@D)
	$(Q)sh scripts/deps.sh
	$(Q)touch $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/lib/%.a:
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# `make test` builds its four trees (plain, ASan+UBSan, TSan, the fuzz targets) with every CPU
# unless -j was given: one job at a time they took 5 of its minutes on 2 cores.
NPROC := $(shell nproc 2>/dev/null || echo 1)
JOBS = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(NPROC))
test:
	$(Q)$(MAKE) --no-print-directory $(JOBS) all
	$(Q)$(MAKE) --no-print-directory $(JOBS) test-san
	$(Q)$(MAKE) --no-print-directory $(JOBS) test-tsan
	$(Q)$(MAKE) --no-print-directory $(JOBS) fuzz
	$(Q)BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/run.sh $(TESTS) $(sort $(wildcard tests/it_*.sh)) $(FUZZ_RUNS)

test-unit: $(TESTS)
	$(Q)BUILD=$(BUILD) sh tests/run.sh $(TESTS)

# Unit tests again under AddressSanitizer and UBSan (corrupt input must never crash).
test-san:
	$(Q)$(MAKE) --no-print-directory SAN=address,undefined BUILD=build/san test-unit

# The concurrent code under ThreadSanitizer: the ring's lock-free slot hand-off (shm/ring.c, with
# producer and consumer threads in test_ring, the balanced shares' report that rides on a slot's
# release with it), the client over it, the server core's workers and
# control thread, and the metrics writer.
TSAN_TESTS := test_ring test_ldc test_srv test_srv_demand test_metrics test_dpkstream test_srv_stream
test-tsan:
	$(Q)$(MAKE) --no-print-directory SAN=thread BUILD=build/tsan \
		$(patsubst %,build/tsan/tests/%,$(TSAN_TESTS))
	$(Q)BUILD=build/tsan sh tests/run.sh $(patsubst %,build/tsan/tests/%,$(TSAN_TESTS))

# GPU tests (tests/module.mk): each exits 77 (SKIP) without a GPU or in a build without CUDA.
test-gpu: all $(GPU_TESTS)
	$(Q)BUILD=$(BUILD) sh tests/run.sh $(GPU_TESTS) $(GPU_SCRIPTS)

check: test

demo: all
	$(Q)BUILD=$(BUILD) sh scripts/demo.sh

clean:
	rm -rf build

DEPFILES += $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(DEPFILES)

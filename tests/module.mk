# tests/: tests/test_NAME.c is one cmocka binary; a line "/* link: FLAGS */" in it adds link flags
# (e.g. -Wl,--wrap=pwrite for fault injection). tests/fuzz_NAME.c is a libFuzzer target (clang).
# Any other tests/NAME.c (with its NAME.h) is a helper the tests share, e.g. srv_harness.c (a
# server core with a pattern filler to test clients against): the helpers make libtests.a, which
# every test links before the libraries, so a test gets the helpers it calls and no others.
TEST_SRC := $(wildcard tests/test_*.c)
TESTS += $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELPER_SRC := $(filter-out tests/test_% tests/fuzz_% tests/gpu_%,$(wildcard tests/*.c))
TEST_HELPER_LIB := $(if $(TEST_HELPER_SRC),$(BUILD)/lib/libtests.a)
$(BUILD)/lib/libtests.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_HELPER_SRC))

define test_rule
$(BUILD)/tests/$(1): $(BUILD)/obj/tests/$(1).o
	$$(Q)mkdir -p $$(@D)
	$$(if $$(Q),@echo "  LD      $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$< $$(TEST_HELPER_LIB) \
		$$(if $$(filter test_trn_%,$(1)),$$(TRN_LIB)) $$(LINKLIBS) $$(SYSLIBS) -lcmocka \
		$$(if $$(filter test_trn_%,$(1)),$$(TRN_SYSLIBS)) \
		$$(shell sed -n 's|^/\* link: \(.*\) \*/$$$$|\1|p' tests/$(1).c)
endef
# test_trn_*: trainer tests, linked with libtrainer, MPI and OpenBLAS too.
$(foreach t,$(patsubst tests/%.c,%,$(TEST_SRC)),$(eval $(call test_rule,$(t))))
$(TESTS): $(LIBS) $(TEST_HELPER_LIB)
$(filter $(BUILD)/tests/test_trn_%,$(TESTS)): $(TRN_LIB)

# libFuzzer targets: built with clang against the formats/ and common/ sources directly (and, for
# fuzz_srv, the server core and shm/; for fuzz_token, the resume token parser; for the JPEG
# targets, the codec's JPEG sources: FUZZ_EXTRA).
FUZZ_CC ?= clang
FUZZ_SRC := $(wildcard tests/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/%.c,build/fuzz/%,$(FUZZ_SRC))
FUZZ_LIBSRC := $(wildcard formats/*.c common/*.c)
FUZZ_RUNS := $(patsubst tests/%.c,fuzz:%,$(FUZZ_SRC))
# fuzz_srv drives the server core itself: it links loader/srv_*.c (with loader/demand.c, the
# controller its workers call, loader/shares.c, the balanced shares, loader/stream_plan.c, the
# stream thread's policy, and loader/stream_share.c, the node cache's share) and shm/ as well.
FUZZ_SRV_SRC := $(wildcard loader/srv_*.c loader/demand.c loader/shares.c loader/stream_plan.c \
	loader/stream_share.c \
	loader/cpu_clock.c shm/*.c) \
	s3/s3cfg.c
build/fuzz/fuzz_srv: FUZZ_EXTRA := $(FUZZ_SRV_SRC)
build/fuzz/fuzz_srv: $(FUZZ_SRV_SRC)
build/fuzz/fuzz_token: FUZZ_EXTRA := shm/token.c shm/ctl.c
build/fuzz/fuzz_token: shm/token.c shm/ctl.c
# The codec's JPEG sources (codec/): the marker walker and probe, the shared header parse, both
# sides of jpeg+idx and jpeg+rst.
FUZZ_CODEC_JPEG := codec/jpeg_probe.c codec/jpeg_hdr.c codec/jpeg_idx.c codec/jpeg_idx_build.c \
	codec/jpeg_rst.c codec/jpeg_rst_build.c
# fuzz_dpk probes every record it reads back as a JPEG (codec/jpeg_probe.c).
build/fuzz/fuzz_dpk: FUZZ_EXTRA := codec/jpeg_probe.c
build/fuzz/fuzz_dpk: codec/jpeg_probe.c
# fuzz_jpeg_idx: the bit-indexed JPEG records and the transcode dpack falls back to (libjpeg).
build/fuzz/fuzz_jpeg_idx: FUZZ_EXTRA := $(FUZZ_CODEC_JPEG) -ljpeg
build/fuzz/fuzz_jpeg_idx: $(FUZZ_CODEC_JPEG)
# fuzz_idx_fields, fuzz_rst_fields: valid jpeg+idx / jpeg+rst records with their index fields or
# restart structure edited, spliced and decoded (codec/decode.c, libjpeg-turbo).
FUZZ_JPEG_SRC := $(FUZZ_CODEC_JPEG) codec/decode.c codec/resize_filter.c
# fuzz_idx_fields decodes 4-component records through their kind (codec/kind_jpeg_cmyk.c): the
# whole codec.
build/fuzz/fuzz_idx_fields: FUZZ_EXTRA := $(wildcard codec/*.c) tests/idx_edit.c -lturbojpeg \
	-ljpeg -lpng16 -lwebp -ltiff
build/fuzz/fuzz_idx_fields: $(wildcard codec/*.c) tests/idx_edit.c tests/idx_edit.h \
	tests/fuzz_jpeg_fields.h
build/fuzz/fuzz_rst_fields: FUZZ_EXTRA := $(FUZZ_JPEG_SRC) -lturbojpeg -ljpeg
build/fuzz/fuzz_rst_fields: $(FUZZ_JPEG_SRC) tests/fuzz_jpeg_fields.h
# fuzz_kinds: the whole-image record kinds (codec/kind_image.h) and the probe that picks one.
FUZZ_KINDS_SRC := $(wildcard codec/*.c)
build/fuzz/fuzz_kinds: FUZZ_EXTRA := $(FUZZ_KINDS_SRC) -lturbojpeg -ljpeg -lpng16 -lwebp -ltiff
build/fuzz/fuzz_kinds: $(FUZZ_KINDS_SRC)
# fuzz_kind_fields: hand-made records of every whole-image kind and raw, header fields edited.
build/fuzz/fuzz_kind_fields: FUZZ_EXTRA := $(FUZZ_KINDS_SRC) -lturbojpeg -ljpeg -lpng16 -lwebp \
	-ltiff -lz
build/fuzz/fuzz_kind_fields: $(FUZZ_KINDS_SRC)
# UBSan is fatal (-fno-sanitize-recover): an undefined operation is a crash libFuzzer keeps.
build/fuzz/%: tests/%.c $(FUZZ_LIBSRC) | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  FUZZ    $@")
	$(Q)$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=all \
		-o $@ $< $(FUZZ_LIBSRC) $(FUZZ_EXTRA) -lxxhash -lzstd -ljson-c -lm -pthread
fuzz: $(FUZZ_BINS)

# GPU tests (`make test-gpu`; not in TESTS, so `make test` never runs them): tests/gpu_NAME.c is
# one plain C program, linked like build/bin/trainer: libtrainer.a (the CUDA device and NCCL when
# nvcc was found, else nocuda.o, whose trn_dev_cuda_open says -ENODEV so that every test exits
# 77), MPI and OpenBLAS. With CUDA they may call the CUDA runtime directly (TRN_TEST_CUDA, e.g.
# cudaMallocHost for the H2D baseline). tests/gpu_*.sh run after them; they find the binaries
# through $BUILD. `make all` builds them too, so that a bundle for the GPU machine has them.
GPU_SRC := $(if $(TRN_LIB),$(wildcard tests/gpu_*.c))
GPU_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(GPU_SRC))
GPU_SCRIPTS := $(sort $(wildcard tests/gpu_*.sh))
$(BUILD)/obj/tests/gpu_%.o: override CFLAGS += $(MPI_CFLAGS)
ifneq ($(filter %.cu.o,$(TRAINER_GPU_OBJ)),)
$(BUILD)/obj/tests/gpu_%.o: override CPPFLAGS += -DTRN_TEST_CUDA -I$(CUDA_HOME)/include
endif
$(GPU_TESTS): $(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TRN_LIB) $(LIBS)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TRN_LIB) $(LINKLIBS) $(SYSLIBS) $(TRN_SYSLIBS)
all: $(GPU_TESTS)
# test_hostile and test_step_limit run the real daemon: build it first (also in the sanitizer
# build).
$(BUILD)/tests/test_hostile $(BUILD)/tests/test_step_limit: $(BUILD)/bin/loaderd

# tests/: tests/test_NAME.c is one cmocka binary; a line "/* link: FLAGS */" in it adds link flags
# (e.g. -Wl,--wrap=pwrite for fault injection). tests/fuzz_NAME.c is a libFuzzer target (clang).
TEST_SRC := $(wildcard tests/test_*.c)
TESTS += $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))

define test_rule
$(BUILD)/tests/$(1): $(BUILD)/obj/tests/$(1).o
	$$(Q)mkdir -p $$(@D)
	$$(if $$(Q),@echo "  LD      $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$< $$(if $$(filter test_trn_%,$(1)),$$(TRN_LIB)) \
		$$(LINKLIBS) $$(SYSLIBS) -lcmocka $$(if $$(filter test_trn_%,$(1)),$$(TRN_SYSLIBS)) \
		$$(shell sed -n 's|^/\* link: \(.*\) \*/$$$$|\1|p' tests/$(1).c)
endef
# test_trn_*: trainer tests, linked with libtrainer, MPI and OpenBLAS too.
$(foreach t,$(patsubst tests/%.c,%,$(TEST_SRC)),$(eval $(call test_rule,$(t))))
$(TESTS): $(LIBS)
$(filter $(BUILD)/tests/test_trn_%,$(TESTS)): $(TRN_LIB)

# libFuzzer targets: built with clang against the formats/ and common/ sources directly.
FUZZ_CC ?= clang
FUZZ_SRC := $(wildcard tests/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/%.c,build/fuzz/%,$(FUZZ_SRC))
FUZZ_LIBSRC := $(wildcard formats/*.c common/*.c)
FUZZ_RUNS := $(patsubst tests/%.c,fuzz:%,$(FUZZ_SRC))
build/fuzz/%: tests/%.c $(FUZZ_LIBSRC) | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  FUZZ    $@")
	$(Q)$(FUZZ_CC) -g -O1 -std=c11 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined \
		-o $@ $< $(FUZZ_LIBSRC) -lxxhash -lzstd -lm -pthread
fuzz: $(FUZZ_BINS)

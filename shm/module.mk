# s3/s3cfg.c: a user's S3 settings and credentials (libc alone), for ldc_s3_offer
SHM_SRC := $(wildcard shm/*.c) $(wildcard s3/s3cfg.c)
ifneq ($(SHM_SRC),)
$(BUILD)/lib/libshm.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(SHM_SRC))
LIBS += $(BUILD)/lib/libshm.a

# libldc.so: the client API as a shared library, for bindings that load it at run time (the Python
# package in python/ uses it through ctypes). Position-independent objects of their own in
# $(BUILD)/pic/, so libshm.a keeps its non-PIC code. A version script exports ldc_* only; ring_*
# and ctl_* stay local. shm/ holds no server code (that is loader/srv_*.c), so libldc.so has none.
# The soname carries LDC_SOVERSION (make install adds libldc.so.$(LDC_SOVERSION) and the
# libldc.so link; python/setup.py names the same): bump it when the ABI of shm/ldc.h changes.
LDC_SOVERSION := 3
BINS += $(BUILD)/lib/libldc.so
$(BUILD)/pic/%.o: %.c | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  CCPIC   $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -c $< -o $@

$(BUILD)/pic/libldc.map: shm/module.mk
	$(Q)mkdir -p $(@D)
	$(Q)printf '{\n  global: ldc_*;\n  local: *;\n};\n' >$@

$(BUILD)/lib/libldc.so: $(patsubst %.c,$(BUILD)/pic/%.o,$(SHM_SRC)) $(BUILD)/pic/libldc.map shm/module.mk
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,libldc.so.$(LDC_SOVERSION) -Wl,--no-undefined \
		-Wl,--version-script=$(BUILD)/pic/libldc.map -o $@ $(filter %.o,$^)
DEPFILES += $(shell find $(BUILD)/pic -name '*.d' 2>/dev/null)
endif

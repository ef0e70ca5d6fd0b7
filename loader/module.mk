# loader/: the daemon. loader/main.c is build/bin/loaderd; the rest is libloader.a (tests link it).
LOADER_SRC := $(filter-out loader/main.c,$(wildcard loader/*.c))
ifneq ($(LOADER_SRC),)
$(BUILD)/lib/libloader.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(LOADER_SRC))
LIBS += $(BUILD)/lib/libloader.a
endif
ifneq ($(wildcard loader/main.c),)
BINS += $(BUILD)/bin/loaderd
$(BUILD)/bin/loaderd: $(BUILD)/obj/loader/main.o $(LIBS)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LINKLIBS) $(SYSLIBS)
endif

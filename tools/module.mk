# tools/: tools/NAME.c is the program NAME; tools/NAME/*.c is the program NAME from several files.
TOOL_SINGLE := $(patsubst tools/%.c,%,$(wildcard tools/*.c))
TOOL_DIRS := $(patsubst tools/%/main.c,%,$(wildcard tools/*/main.c))
TOOL_BINS := $(patsubst %,$(BUILD)/bin/%,$(TOOL_SINGLE) $(TOOL_DIRS))
BINS += $(TOOL_BINS)

$(foreach t,$(TOOL_SINGLE),$(eval $(BUILD)/bin/$(t): $(BUILD)/obj/tools/$(t).o))
$(foreach t,$(TOOL_DIRS),$(eval $(BUILD)/bin/$(t): \
	$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/$(t)/*.c))))

# Only ldbench (it runs the fill in-process), ldaug (a job's augmentations, loader/job_aug.c) and
# ldcachesim (it replays the sampler) link the daemon's library; every other tool links what
# lies below loader/ (codec/, formats/, shm/, common/), as scripts/check_layers.sh holds its includes.
TOOL_WITH_LOADER := ldbench ldaug ldcachesim
TOOL_LINKLIBS = $(if $(filter $(TOOL_WITH_LOADER),$(notdir $@)),$(LINKLIBS),\
	$(filter-out %/libloader.a,$(LINKLIBS)))

$(TOOL_BINS): $(LIBS)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(TOOL_LINKLIBS) $(SYSLIBS)

# tools/NAME.py is the program NAME too: a Python 3 script (standard library only), installed as
# $(BUILD)/bin/NAME with mode 755. python3 comes from scripts/deps.sh.
TOOL_PY := $(patsubst tools/%.py,%,$(wildcard tools/*.py))
TOOL_PY_BINS := $(patsubst %,$(BUILD)/bin/%,$(TOOL_PY))
BINS += $(TOOL_PY_BINS)

$(TOOL_PY_BINS): $(BUILD)/bin/%: tools/%.py | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  INSTALL $@")
	$(Q)install -m 755 $< $@

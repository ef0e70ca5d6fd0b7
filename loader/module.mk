LOADER_SRC := $(wildcard loader/*.c)
ifneq ($(LOADER_SRC),)
$(BUILD)/lib/libloader.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(LOADER_SRC))
LIBS += $(BUILD)/lib/libloader.a
endif

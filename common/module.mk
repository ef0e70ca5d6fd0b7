COMMON_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard common/*.c))
$(BUILD)/lib/libcommon.a: $(COMMON_OBJ)
LIBS += $(BUILD)/lib/libcommon.a

FORMATS_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard formats/*.c))
$(BUILD)/lib/libformats.a: $(FORMATS_OBJ)
LIBS += $(BUILD)/lib/libformats.a

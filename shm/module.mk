SHM_SRC := $(wildcard shm/*.c)
ifneq ($(SHM_SRC),)
$(BUILD)/lib/libshm.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(SHM_SRC))
LIBS += $(BUILD)/lib/libshm.a
endif

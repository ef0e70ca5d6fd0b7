# codec/: the record codec, below both loader/ and tools/: the kinds, the JPEG index and restart
# rewrite (pack side), their splices and the decode and resize (load side). libcodec.a.
CODEC_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard codec/*.c))
$(BUILD)/lib/libcodec.a: $(CODEC_OBJ)
LIBS += $(BUILD)/lib/libcodec.a
# The resize loops are the one place where -O3's vectoriser pays (measured with perf; see decode.c).
$(BUILD)/obj/codec/decode.o: override CFLAGS += -O3
# And the augmentations' and the filtered resize's per-pixel loops (tools/bench/augment_cost.py).
$(BUILD)/obj/codec/augment.o $(BUILD)/obj/codec/resize_filter.o: override CFLAGS += -O3 -fno-trapping-math

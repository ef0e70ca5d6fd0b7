# s3/: the S3 client (libcurl, expat, OpenSSL's SHA-256). Linked by the tools that take s3:// URLs
# (S3_TOOLS) and the tests that say so; never by loaderd, which has no network (docs/S3.md).
# s3cfg.c (credentials and endpoint, libc alone) is not in libs3.a: libshm.a and libldc.so carry it
# for the client library's ldc_s3_offer (shm/module.mk), and every link takes libshm.a.
S3_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out s3/s3cfg.c,$(wildcard s3/*.c)))
$(BUILD)/lib/libs3.a: $(S3_OBJ)
LIBS += $(BUILD)/lib/libs3.a
S3_SYSLIBS := -lcurl -lexpat -lcrypto
S3_TOOLS := dpack ldcat ldfetch
$(patsubst %,$(BUILD)/bin/%,$(S3_TOOLS)): SYSLIBS += $(S3_SYSLIBS)

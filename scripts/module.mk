# scripts/: `make install` and `make uninstall`. PREFIX (default /usr/local) is where the files
# will live; DESTDIR, prepended to every path, is where they are written (a package's staging
# tree). Installed: the programs into bin/; libldc.so.$(LDC_SOVERSION) with its libldc.so link
# into lib/; loaderd.pc into lib/pkgconfig/; the client API's headers (shm/ldc.h and the three it
# includes) into include/loaderd/; the docs (python/README.md as python.md) into
# share/doc/loaderd/; ldprobe's SVG renderer (python/loaderd/timeline.py) into share/loaderd/;
# loaderd.service into lib/systemd/system/; its opt-in drop-in for the node cache of s3://
# datasets (loaderd-cache.conf) into share/loaderd/. loaderd.pc and loaderd.service
# are made from scripts/*.in with PREFIX's paths filled in. `make uninstall` (same PREFIX and DESTDIR) removes exactly those files, and the
# two directories of loaderd's own (include/loaderd, share/doc/loaderd) when they are empty.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DOCDIR ?= $(PREFIX)/share/doc/loaderd
UNITDIR ?= $(PREFIX)/lib/systemd/system
DATADIR ?= $(PREFIX)/share/loaderd
LOADERD_VERSION := 0.1.0

INSTALL_PROGS := $(notdir $(filter $(BUILD)/bin/%,$(BINS)))
INSTALL_HDRS := shm/ldc.h shm/ctl.h shm/ring.h shm/token.h
INSTALL_DOCS := README.md $(wildcard docs/*.md docs/*.svg)
# Where each kind goes, DESTDIR included.
I_BIN := $(DESTDIR)$(BINDIR)
I_LIB := $(DESTDIR)$(LIBDIR)
I_INC := $(DESTDIR)$(INCLUDEDIR)/loaderd
I_DOC := $(DESTDIR)$(DOCDIR)
I_UNIT := $(DESTDIR)$(UNITDIR)
I_DATA := $(DESTDIR)$(DATADIR)
SUBST := sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	-e 's|@DOCDIR@|$(DOCDIR)|g' -e 's|@VERSION@|$(LOADERD_VERSION)|g' -e 's|@DATADIR@|$(DATADIR)|g'

.PHONY: install uninstall
install: $(BINS)
	$(if $(Q),@echo "  INSTALL $(DESTDIR)$(PREFIX)")
	$(Q)install -d $(I_BIN) $(I_LIB)/pkgconfig $(I_INC) $(I_DOC) $(I_UNIT) $(I_DATA)
	$(Q)install -m 755 $(addprefix $(BUILD)/bin/,$(INSTALL_PROGS)) $(I_BIN)/
	$(Q)install -m 755 $(BUILD)/lib/libldc.so $(I_LIB)/libldc.so.$(LDC_SOVERSION)
	$(Q)ln -sfn libldc.so.$(LDC_SOVERSION) $(I_LIB)/libldc.so
	$(Q)$(SUBST) scripts/loaderd.pc.in >$(I_LIB)/pkgconfig/loaderd.pc
	$(Q)chmod 644 $(I_LIB)/pkgconfig/loaderd.pc
	$(Q)install -m 644 $(INSTALL_HDRS) $(I_INC)/
	$(Q)install -m 644 $(INSTALL_DOCS) $(I_DOC)/
	$(Q)install -m 644 python/README.md $(I_DOC)/python.md
	$(Q)install -m 644 python/loaderd/timeline.py $(I_DATA)/
	$(Q)$(SUBST) scripts/loaderd-cache.conf.in >$(I_DATA)/loaderd-cache.conf
	$(Q)chmod 644 $(I_DATA)/loaderd-cache.conf
	$(Q)$(SUBST) scripts/loaderd.service.in >$(I_UNIT)/loaderd.service
	$(Q)chmod 644 $(I_UNIT)/loaderd.service

uninstall:
	$(if $(Q),@echo "  UNINST  $(DESTDIR)$(PREFIX)")
	$(Q)rm -f $(addprefix $(I_BIN)/,$(INSTALL_PROGS)) \
		$(I_LIB)/libldc.so.$(LDC_SOVERSION) $(I_LIB)/libldc.so $(I_LIB)/pkgconfig/loaderd.pc \
		$(addprefix $(I_INC)/,$(notdir $(INSTALL_HDRS))) \
		$(addprefix $(I_DOC)/,$(notdir $(INSTALL_DOCS)) python.md) $(I_UNIT)/loaderd.service $(I_DATA)/timeline.py \
		$(I_DATA)/loaderd-cache.conf
	$(Q)rmdir $(I_INC) $(I_DOC) $(I_DATA) 2>/dev/null || true

# `make coverage`: line and branch coverage over the tests of `make test` (the cmocka suites and
# the integration scripts; not the sanitizer pass nor the fuzzers), with gcov and Debian's lcov.
# A build of its own in $(COV_BUILD) (gcov counters at -O1, updated atomically: the daemon and the
# tests are threaded); scripts/coverage.sh zeroes the counters, runs the tests, captures, writes
# the HTML report to $(COV_BUILD)/html and the table per folder to $(COV_BUILD)/coverage.md (the
# one docs/ARCHITECTURE.md quotes), and prints that table. Exits non-zero when a test failed (the
# figures are still written). Not part of `make test`: it builds and runs everything once more.
COV_BUILD ?= build/cov
COV_CFLAGS := -O1 -g --coverage -fprofile-update=atomic -Wno-maybe-uninitialized
.PHONY: coverage coverage-run
# -u __gcov_dump: linked in, so that the test harness's forked children (tests/srv_harness.c)
# can write their counters before _exit (their weak reference alone would not pull it in).
COV_LDFLAGS := --coverage -Wl,-u,__gcov_dump
coverage:
	$(Q)$(MAKE) --no-print-directory BUILD=$(COV_BUILD) CFLAGS="$(COV_CFLAGS)" \
		LDFLAGS="$(COV_LDFLAGS)" coverage-run

coverage-run: all
	$(Q)BUILD=$(BUILD) sh scripts/coverage.sh $(TESTS) $(sort $(wildcard tests/it_*.sh))

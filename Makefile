# Thin wrapper over Meson/Ninja so a newcomer needs only `make demo` and `make test`.
# Build folders: build/ (gcc, what users run), build-san/ (clang, ASan+UBSan, fuzz targets).

BUILD      ?= build
BUILD_SAN  ?= build-san
PYTHON     ?= python3
FUZZ_SECONDS ?= 5

.PHONY: all deps build build-san demo test test-fresh test-unit test-san test-system test-apps testbed testbed-down bench clean \
        conformance conformance-deps

all: build

deps:
	@scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD)

$(BUILD_SAN)/build.ninja:
	CC=clang meson setup $(BUILD_SAN) -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=true

build: $(BUILD)/build.ninja
	ninja -C $(BUILD)

build-san: $(BUILD_SAN)/build.ninja
	ninja -C $(BUILD_SAN)

demo: deps build
	@$(PYTHON) scripts/demo.py $(BUILD)

test: deps build build-san
	$(MAKE) --no-print-directory test-unit test-san test-system

# What CI runs (.ci/run): `make test` in a clean Debian 12 chroot, from the committed HEAD.
test-fresh:
	scripts/fresh-machine.sh make test

test-unit: build
	meson test -C $(BUILD) --print-errorlogs --suite unit

# Unit tests again under ASan+UBSan, plus a short smoke run of every fuzz target.
test-san: build-san
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 FUZZ_SECONDS=$(FUZZ_SECONDS) \
	  meson test -C $(BUILD_SAN) --print-errorlogs --suite unit --suite fuzz

# A test that fails is run once more, alone, and fails the target only if it fails again: a
# system test that still depends on timing on a loaded 2-core machine would be a bug to mend, but
# it should not hide everything else meanwhile. Both runs are printed, so a test that needed the
# second one is visible in the log.
SYSTEST = SLIP_BUILD=$(abspath $(BUILD)) SLIP_BUILD_SAN=$(abspath $(BUILD_SAN)) $(PYTHON) -m pytest -ra

test-system: build
	$(SYSTEST) tests/system || { \
	  echo "test-system: FLAKY? running the failed tests once more (a second failure fails the run)"; \
	  $(SYSTEST) --last-failed --last-failed-no-failures none tests/system; }

# The real-programs suite alone (also part of test-system): nginx, curl, iperf3, sockperf, redis,
# memcached, Python, asyncio/uvloop, sshd with its seccomp sandbox, Node, MariaDB, Go and static programs
# (reported, on the kernel), immediate restarts, netperf's TCP_MAERTS pattern, threads, stdio.
APP_TESTS = test_apps.py test_sshd.py test_seccomp.py test_node.py test_mariadb.py test_go.py test_restart.py test_maerts.py \
            test_threads.py test_io_uring.py test_stdio.py test_blocking_calls.py
test-apps: deps build
	$(SYSTEST) $(addprefix tests/system/,$(APP_TESTS)) || { \
	  echo "test-apps: FLAKY? running the failed tests once more (a second failure fails the run)"; \
	  $(SYSTEST) --last-failed --last-failed-no-failures none $(addprefix tests/system/,$(APP_TESTS)); }

testbed: build
	$(PYTHON) scripts/testbed.py up

testbed-down:
	$(PYTHON) scripts/testbed.py down

# Opt-in, not part of `make test`: packetdrill's TCP scripts against the kernel and slipstream
# (scripts/conformance.py). PACKETDRILL_SRC=<checkout of google/packetdrill>; without it the
# target says so and does nothing. conformance-deps installs what building packetdrill needs.
conformance: build
	PACKETDRILL_SRC=$(PACKETDRILL_SRC) SLIP_BUILD=$(abspath $(BUILD)) $(PYTHON) scripts/conformance.py

conformance-deps:
	apt-get install -y --no-install-recommends bison flex make gcc

bench: deps build
	bench/run

clean:
	rm -rf $(BUILD) $(BUILD_SAN)

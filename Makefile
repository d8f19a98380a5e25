# sparkrt: the two commands are `make demo` and `make test`. Both install
# missing system packages first (Debian 12), configure, build and run.
#
#   make deps      install missing build dependencies (apt; only what is missing)
#   make build     configure (CMake + Ninja) and build into $(BUILD)
#   make test      build, then run every test (GPU tests skip without a GPU)
#   make demo      build the tool and the plugins it loads (not the tests and
#                  benchmarks), then `sparkrt info` and `sparkrt demo` (one decode
#                  step of a small attention layer, checked and timed) on the
#                  auto-selected backend (cpu without a GPU), or DEMO_BACKEND=cuda|cpu|mock
#   make sanitize  build into $(SANITIZE_BUILD) with ASan + UBSan and run the tests
#   make tsan      build into $(TSAN_BUILD) with ThreadSanitizer and run the
#                  concurrency tests (CTest label `concurrency`)
#   make fuzz      build the PTX parser's libFuzzer target with clang into
#                  $(FUZZ_BUILD) and fuzz it for FUZZ_SECONDS (default 60; 0: until
#                  a failure or Ctrl-C), e.g. `make fuzz FUZZ_SECONDS=600`. Seeds in
#                  tests/fuzz/corpus; new inputs kept in $(FUZZ_BUILD)/fuzz/corpus,
#                  a failing input written to $(FUZZ_BUILD)/fuzz/artifacts
#   make install   install into $(PREFIX)
#   make clean     remove the build folders

BUILD ?= build
SANITIZE_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TIMEOUT ?= 10
FUZZ_ARGS ?=
FUZZ_CC ?= clang-14
FUZZ_CXX ?= clang++-14
PREFIX ?= /usr/local
DEMO_BACKEND ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_JOBS ?= 2
CMAKE_ARGS ?=

# The Debian packages the build and the tests need (python3, numpy, pytest,
# rustc and cargo: the Python package's and the Rust example's tests). nvcc (the CUDA 13 toolkit) comes from
# NVIDIA, not from Debian, and is optional: without it there are no CUDA
# kernel images (README.md).
PACKAGES := cmake ninja-build g++ pkg-config \
  libvulkan-dev mesa-vulkan-drivers glslc glslang-tools spirv-tools vulkan-tools \
  vulkan-validationlayers libboost-dev doctest-dev libabsl-dev libbenchmark-dev \
  python3 python3-numpy python3-pytest rustc cargo
# libFuzzer and the sanitizer runtimes for clang, for `make fuzz` only.
FUZZ_PACKAGES := clang-14 libclang-rt-14-dev
EXTRA_PACKAGES ?=
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
NVCC_HINT := /usr/local/cuda/bin

CTEST := ctest --output-on-failure --no-tests=error -j$(TEST_JOBS)

.PHONY: deps configure build test demo sanitize tsan fuzz install clean

deps:
	@missing=""; \
	for p in $(PACKAGES) $(EXTRA_PACKAGES); do \
	  dpkg -s $$p 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	else \
	  echo "deps: all packages present"; \
	fi
	@command -v nvcc >/dev/null 2>&1 || [ -x $(NVCC_HINT)/nvcc ] || \
	  echo "deps: nvcc not found (looked in PATH and $(NVCC_HINT)): building without CUDA" \
	       "kernels (the cuda backend will have none); install the CUDA 13 toolkit for them" >&2

configure: deps
	cmake -G Ninja -S . -B $(BUILD) $(CMAKE_ARGS)

build: configure
	ninja -C $(BUILD) -j$(JOBS)

test: build
	$(CTEST) --test-dir $(BUILD)

# Empty DEMO_BACKEND: SPARKRT_BACKEND from the environment, else auto.
DEMO_ENV := $(if $(DEMO_BACKEND),SPARKRT_BACKEND=$(DEMO_BACKEND))

# What `sparkrt info` and `sparkrt demo` load at run time: the tool (the
# kernels are embedded in libsparkrt) and the in-tree backend plugins.
DEMO_TARGETS := sparkrt_cli sparkrt_backend_cuda sparkrt_backend_cpu sparkrt_backend_mock \
  sparkrt_backend_vulkan

demo: configure
	ninja -C $(BUILD) -j$(JOBS) $(DEMO_TARGETS)
	$(DEMO_ENV) $(BUILD)/bin/sparkrt info
	@echo
	$(DEMO_ENV) $(BUILD)/bin/sparkrt demo

# Benchmarks are left out: timings under the sanitizers mean nothing.
# tests/lsan.supp names what is suppressed and why.
sanitize: deps
	cmake -G Ninja -S . -B $(SANITIZE_BUILD) -DSPARKRT_SANITIZE=ON \
	  -DSPARKRT_BUILD_BENCHMARKS=OFF -DCMAKE_BUILD_TYPE=Debug $(CMAKE_ARGS)
	ninja -C $(SANITIZE_BUILD) -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(CTEST) --test-dir $(SANITIZE_BUILD)

# The concurrency tests only (16 threads on one device, devices opened and
# closed under launches), on the mock and cpu backends. tests/tsan.supp
# names what is suppressed and why.
TSAN_TARGETS := sparkrt_concurrency_tests
tsan: deps
	cmake -G Ninja -S . -B $(TSAN_BUILD) -DSPARKRT_TSAN=ON \
	  -DSPARKRT_BUILD_BENCHMARKS=OFF $(CMAKE_ARGS)
	ninja -C $(TSAN_BUILD) -j$(JOBS) $(TSAN_TARGETS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  $(CTEST) --test-dir $(TSAN_BUILD) -L concurrency

# Only the fuzz target is built (the parser's source compiled into it), so no
# kernels are compiled. A failure (crash, hang past FUZZ_TIMEOUT seconds, or a
# broken invariant) stops the run and exits non-zero; rerun the saved input
# with $(FUZZ_BUILD)/bin/sparkrt_ptx_fuzzer <file>.
fuzz:
	@$(MAKE) --no-print-directory deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	cmake -G Ninja -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) \
	  -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DSPARKRT_FUZZ=ON -DSPARKRT_BUILD_BENCHMARKS=OFF \
	  $(CMAKE_ARGS)
	ninja -C $(FUZZ_BUILD) -j$(JOBS) sparkrt_ptx_fuzzer
	mkdir -p $(FUZZ_BUILD)/fuzz/corpus $(FUZZ_BUILD)/fuzz/artifacts
	$(FUZZ_BUILD)/bin/sparkrt_ptx_fuzzer -max_total_time=$(FUZZ_SECONDS) \
	  -timeout=$(FUZZ_TIMEOUT) -dict=tests/fuzz/ptx.dict -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/fuzz/artifacts/ $(FUZZ_ARGS) \
	  $(FUZZ_BUILD)/fuzz/corpus tests/fuzz/corpus

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

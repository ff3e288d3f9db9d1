# wmtp — the two commands a new user types: `make demo` and `make test`.
# Both install what is missing first (scripts/setup.sh), so each is one command on a fresh machine.
# `make check` is the developer's quick loop (unit tests and one 2-rank test).
# Clusters with a CUDA LibTorch: see Makefile.hpc.
#
# Two build trees, two LibTorch versions:
#   build/          Debian's LibTorch 1.13 (CPU), a 300 MB apt install: `make demo` and `make test`'s first
#                   leg (the programs; the tests labelled leg1: every pipeline's tiny end-to-end chain).
#   build-torch2/   PyTorch 2.x's LibTorch from a pip wheel in .venv-torch (setup.sh --torch2, ~8 GB), with
#                   CUDA and NCCL on (WMTP_WITH_CUDA): every CUDA translation unit compiles and links
#                   against the machine's CUDA toolkit, and the whole CPU suite runs on it (the second
#                   leg). `make check` and `make bench` use it too.
BUILD_DIR ?= build
TORCH2_BUILD_DIR ?= build-torch2
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
VENV ?= $(CURDIR)/.venv-torch
# What each leg runs. The GPU-only tests (label gpu) run on a GPU machine (scripts/gpu-check.sh);
# figures-1.13: expected figures measured with Debian's LibTorch (the first leg runs those).
DEBIAN_LEG_TARGETS ?= programs tiny-tokenizer edit_train_state
DEBIAN_LEG_LABELS ?= leg1
TORCH2_LEG_EXCLUDE ?= gpu|figures-1.13

.PHONY: all build build-torch2 programs test test-debian test-torch2 check demo bench clean setup deps deps-torch2

all: build

# setup.sh installs only what is missing (dpkg query, no network when all is there) and re-checks
# BLAS, parallel HDF5 and mpirun in a second or two, so every build goes through it.
deps:
	@bash scripts/setup.sh

setup:
	bash scripts/setup.sh

deps-torch2:
	@bash scripts/setup.sh --torch2

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

$(TORCH2_BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(TORCH2_BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DWMTP_TORCH_PYTHON=$(VENV)/bin/python3 \
	  -DWMTP_WITH_CUDA=ON -DWMTP_BIN_DIR=$(CURDIR)/$(TORCH2_BUILD_DIR)/bin $(CMAKE_FLAGS)

build-torch2: deps-torch2 $(TORCH2_BUILD_DIR)/CMakeCache.txt
	cmake --build $(TORCH2_BUILD_DIR) -j $(JOBS)
	@echo "build-torch2: $$(grep -c . $(TORCH2_BUILD_DIR)/wmtp-cuda-units.txt) CUDA translation units compiled and linked (wmtp-cuda-units.txt)"

# Only the programs and the tokenizer shim: what the demo runs (no tests, no sanitizer builds).
programs: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target programs

# --no-tests=error: a build without GoogleTest has no tests, and that must fail, not pass.
# Both legs run even when the first fails, and `make test` fails when either did.
test: deps-torch2
	@rc=0; $(MAKE) --no-print-directory test-debian || rc=1; \
	 $(MAKE) --no-print-directory test-torch2 || rc=1; exit $$rc

test-debian: deps $(BUILD_DIR)/CMakeCache.txt
	@echo "== leg 1: Debian LibTorch 1.13, CPU ($(BUILD_DIR)) =="
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(DEBIAN_LEG_TARGETS)
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L '$(DEBIAN_LEG_LABELS)'

test-torch2: build-torch2
	@echo "== leg 2: PyTorch $$($(VENV)/bin/python3 -c 'import torch; print(torch.__version__)') LibTorch, CUDA build, CPU suite ($(TORCH2_BUILD_DIR)) =="
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -LE '$(TORCH2_LEG_EXCLUDE)'

# A few minutes: every unit test, then the MTP model through the sharding engine at 2 ranks
# against one process (the equivalence everything else rests on), on the PyTorch 2.x build.
check: build-torch2
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L unit -LE gpu
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -R '^test_shard_mtp_np2$$'

demo: programs
	bash scripts/demo.sh

# wmtp built against PyTorch 2.x beside that PyTorch's eager and torch.compile peers (bench/README.md).
bench: build-torch2
	cmake --build $(TORCH2_BUILD_DIR) -j $(JOBS) --target benches

clean:
	rm -rf $(BUILD_DIR) $(TORCH2_BUILD_DIR) bin

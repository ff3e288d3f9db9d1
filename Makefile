# wmtp — the two commands a new user types: `make demo` and `make test`.
# Both install what is missing first (scripts/setup.sh), so each is one command on a fresh machine,
# and both end by printing where their time went (scripts/timed.sh).
# `make check` is the developer's quick loop (unit tests and one 2-rank test).
# Clusters with a CUDA LibTorch: see Makefile.hpc.
#
# Two build trees, two LibTorch versions:
#   build/          Debian's LibTorch 1.13 (CPU), a 160 MB apt install: the programs `make demo` runs.
#                   `make test`'s first leg builds them and runs the demo itself on them: what a new
#                   user's first command does must work.
#   build-torch2/   PyTorch 2.x's LibTorch from a pip wheel in .venv-torch (setup.sh --venv, 6.4 GB), with
#                   CUDA and NCCL on (WMTP_WITH_CUDA): every CUDA translation unit compiles and links
#                   against the machine's CUDA toolkit, the benches build, and the whole CPU suite runs
#                   on it (the second leg). `make check` and `make bench` use it too.
# docs/gpu.md ("What CI builds") says why two trees; docs/architecture.md ("Build"), what they cost.
BUILD_DIR ?= build
TORCH2_BUILD_DIR ?= build-torch2
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
VENV ?= $(CURDIR)/.venv-torch
# ccache rewrites paths under the checkout to relative ones; the unity and precompiled-header units
# still include their files by absolute path, so what hits is a tree made again in this checkout.
export CCACHE_BASEDIR ?= $(CURDIR)
# The GPU-only tests (label gpu) run on a GPU machine (scripts/gpu-check.sh); those labelled leg1
# run in the first leg.
TORCH2_LEG_EXCLUDE ?= gpu|leg1
TIMED = bash scripts/timed.sh
# Ninja when installed (scripts/setup.sh installs it), decided when a tree is first configured.
GENERATOR = $$(command -v ninja > /dev/null && echo Ninja || echo "Unix Makefiles")

.PHONY: all build build-torch2 programs test check demo bench clean setup deps deps-test deps-torch2 \
        configure configure-torch2 build-programs build-all-torch2 leg1 leg2

all: build

# setup.sh installs only what is missing (dpkg query, no network when all is there) and re-checks
# BLAS, parallel HDF5 and mpirun in a second or two, so every build goes through it.
deps:
	@bash scripts/setup.sh

setup:
	bash scripts/setup.sh --torch2

deps-test:
	@bash scripts/setup.sh --test

deps-torch2:
	@bash scripts/setup.sh --torch2

# ---- the targets below the dependencies (each public target puts its deps first)
configure:
	@[ -f $(BUILD_DIR)/CMakeCache.txt ] || cmake -S . -B $(BUILD_DIR) -G "$(GENERATOR)" \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure-torch2:
	@[ -f $(TORCH2_BUILD_DIR)/CMakeCache.txt ] || cmake -S . -B $(TORCH2_BUILD_DIR) -G "$(GENERATOR)" \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DWMTP_TORCH_PYTHON=$(VENV)/bin/python3 \
	  -DWMTP_WITH_CUDA=ON -DWMTP_BIN_DIR=$(CURDIR)/$(TORCH2_BUILD_DIR)/bin $(CMAKE_FLAGS)

# Only the programs and the tokenizer shim: what the demo runs (no tests, no sanitizer builds).
build-programs: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target programs

# Everything, the benches included: an API change cannot break them unseen.
build-all-torch2: configure-torch2
	cmake --build $(TORCH2_BUILD_DIR) -j $(JOBS)
	cmake --build $(TORCH2_BUILD_DIR) -j $(JOBS) --target benches
	@echo "build-torch2: $$(grep -c . $(TORCH2_BUILD_DIR)/wmtp-cuda-units.txt) CUDA translation units compiled and linked (wmtp-cuda-units.txt)"

# ---- public targets
build: deps-test configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

build-torch2: deps-torch2
	@$(MAKE) --no-print-directory build-all-torch2

programs: deps
	@$(MAKE) --no-print-directory build-programs

demo:
	@$(TIMED) $(BUILD_DIR)/phases-demo.txt --start; \
	 $(TIMED) $(BUILD_DIR)/phases-demo.txt apt bash scripts/setup.sh && \
	 $(TIMED) $(BUILD_DIR)/phases-demo.txt build $(MAKE) --no-print-directory build-programs && \
	 $(TIMED) $(BUILD_DIR)/phases-demo.txt demo bash scripts/demo.sh; rc=$$?; \
	 $(TIMED) $(BUILD_DIR)/phases-demo.txt --summary "make demo"; exit $$rc

# Leg 1: Debian's LibTorch 1.13 (CPU): the programs and the demo on them (scripts/demo.sh checks its
# own results: losses that fall, a resume, exports, the same pass@1 with and without speculation),
# then the tests labelled leg1 (figures measured with this LibTorch; they need only the programs).
leg1: build-programs
	@echo "== leg 1: Debian LibTorch 1.13, CPU ($(BUILD_DIR)): make demo's programs and the demo =="
	bash scripts/demo.sh
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -L leg1

# Leg 2: PyTorch 2.x's LibTorch with CUDA compiled in: every test but the GPU-only ones.
# --no-tests=error: a build without GoogleTest has no tests, and that must fail, not pass.
leg2: configure-torch2
	@echo "== leg 2: PyTorch $$($(VENV)/bin/python3 -c 'import torch; print(torch.__version__)') LibTorch, CUDA build, CPU suite ($(TORCH2_BUILD_DIR)) =="
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -LE '$(TORCH2_LEG_EXCLUDE)'

# The venv (6.4 GB from PyPI, mostly waiting on the network) is made in the background while the
# first leg compiles and runs; the time left waiting for it is a phase of its own (`tail --pid`: a
# process run through timed.sh cannot `wait` for this shell's child; `wait` then reads its status).
# Both legs run even when the first fails; `make test` fails when either did. The log of the
# background install is printed when it fails.
test:
	@log=$(CURDIR)/$(BUILD_DIR)/phases-test.txt; venv_log=$(CURDIR)/$(BUILD_DIR)/venv-install.log; \
	 $(TIMED) $$log --start; rc=0; \
	 if $(TIMED) $$log apt bash scripts/setup.sh --test; then \
	   ( $(TIMED) $$log "venv(background)" bash scripts/setup.sh --venv > $$venv_log 2>&1 ) & venv=$$!; \
	   { $(TIMED) $$log leg1-build $(MAKE) --no-print-directory build-programs && \
	     $(TIMED) $$log leg1-demo $(MAKE) --no-print-directory leg1; } || rc=1; \
	   $(TIMED) $$log venv-wait tail --pid=$$venv -f /dev/null; wait $$venv || { rc=1; tail -30 $$venv_log; }; \
	   { $(TIMED) $$log leg2-build $(MAKE) --no-print-directory build-all-torch2 && \
	     $(TIMED) $$log leg2-tests $(MAKE) --no-print-directory leg2; } || rc=1; \
	 else rc=1; fi; \
	 $(TIMED) $$log --summary "make test"; exit $$rc

# A few minutes: every unit test, then the MTP model through the sharding engine at 2 ranks
# against one process (the equivalence everything else rests on), on the PyTorch 2.x build.
check: build-torch2
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L unit -LE gpu
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure --no-tests=error -R '^test_shard_mtp_np2$$'

# wmtp built against PyTorch 2.x beside that PyTorch's eager and torch.compile peers (bench/README.md).
bench: build-torch2

clean:
	rm -rf $(BUILD_DIR) $(TORCH2_BUILD_DIR) bin

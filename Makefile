# wmtp — the two commands a new user types: `make demo` and `make test`.
# Both install missing Debian packages first (scripts/setup.sh), so each is one command on a fresh
# machine. `make check` is the developer's quick loop (unit tests and one 2-rank test).
# Clusters with a CUDA LibTorch: see Makefile.hpc.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build programs test check demo bench clean setup deps

all: build

# setup.sh installs only what is missing (dpkg query, no network when all is there) and re-checks
# BLAS, parallel HDF5 and mpirun in a second or two, so every build goes through it.
deps:
	@bash scripts/setup.sh

setup:
	bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only the programs and the tokenizer shim: what the demo runs (no tests, no sanitizer builds).
programs: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target programs

# --no-tests=error: a build without GoogleTest has no tests, and that must fail, not pass.
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS)

# A few minutes: every unit test, then the MTP model through the sharding engine at 2 ranks
# against one process (the equivalence everything else rests on).
check: build
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L unit
	cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -R '^test_shard_mtp_np2$$'

demo: programs
	bash scripts/demo.sh

bench: build
	@bash scripts/setup.sh --bench
	cmake --build $(BUILD_DIR) -j $(JOBS) --target benches

clean:
	rm -rf $(BUILD_DIR) bin

# wmtp — the two commands a new user types: `make demo` and `make test`.
# Both install missing Debian packages first (scripts/setup.sh), so each is one command on a fresh
# machine. Clusters with a CUDA LibTorch: see Makefile.hpc.
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all build test demo bench clean setup deps

all: build

# Run the setup script only when something is missing (it is idempotent, but apt-get update is slow).
deps:
	@if ! command -v mpirun >/dev/null || ! test -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake \
	   || ! test -f /usr/include/hdf5/openmpi/hdf5.h || ! command -v spm_train >/dev/null \
	   || ! command -v h5ls >/dev/null || ! test -f /usr/include/toml++/toml.h \
	   || ! readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 | grep -q openblas; then \
	  bash scripts/setup.sh; fi

setup:
	bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	bash scripts/demo.sh

bench: build
	cmake --build $(BUILD_DIR) -j $(JOBS) --target benches

clean:
	rm -rf $(BUILD_DIR) bin

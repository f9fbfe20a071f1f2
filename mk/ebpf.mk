# eBPF tracing (internal/trace): the toolchain, regenerating the committed
# BPF objects and their Go bindings, and checking that they match their
# sources. Included by the top Makefile.

# What bpf2go needs to compile the programs (clang 14 and llvm-strip from
# Debian; <bpf/bpf_helpers.h> from libbpf-dev) and bpftool to inspect them.
EBPF_DEPS      := clang llvm libbpf-dev bpftool
EBPF_DIR       := internal/trace
EBPF_GENERATED := $(addprefix $(EBPF_DIR)/,rm_bpfel.go rm_bpfel.o \
                    calls_x86_bpfel.go calls_x86_bpfel.o calls_arm64_bpfel.go calls_arm64_bpfel.o \
                    launches_bpfel.go launches_bpfel.o)
SUDO           ?= $(shell [ "$$(id -u)" = 0 ] || command -v sudo)

.PHONY: deps ebpf-generate ebpf-check

# Installs the toolchain with apt-get, only what is missing: a no-op (and
# silent) once everything is there. IMAGE_DEPS (mk/image.mk) are the tools
# the image test unpacks and reads the image with.
deps:
	@if ! command -v dpkg-query >/dev/null; then \
	  command -v clang >/dev/null || { echo "deps: not a Debian system: install $(EBPF_DEPS) by hand"; exit 1; }; \
	  exit 0; \
	fi; \
	missing=; \
	for p in $(EBPF_DEPS) $(IMAGE_DEPS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

# Recompiles the BPF programs and their Go bindings (go:generate lines in
# internal/trace/gen.go). Commit the result.
ebpf-generate:
	$(GO) generate ./$(EBPF_DIR)/

# Regenerates and compares with what is in the tree (in CI's fresh clone:
# what is committed), then with git's copy when the files are tracked. A
# change to the C sources without a regeneration, or a regeneration left
# uncommitted, fails.
ebpf-check:
	@command -v clang >/dev/null || { echo "ebpf-check: clang not found (make deps)"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	cp $(EBPF_GENERATED) "$$tmp"/ && \
	$(GO) generate ./$(EBPF_DIR)/ && \
	status=0 && \
	for f in $(EBPF_GENERATED); do \
	  cmp -s $$f "$$tmp/$${f##*/}" || { echo "ebpf-check: $$f differs from what its sources generate"; status=1; }; \
	done; \
	if git ls-files --error-unmatch $(EBPF_GENERATED) >/dev/null 2>&1; then \
	  git --no-pager diff --exit-code --stat -- $(EBPF_GENERATED) || status=1; \
	fi; \
	[ $$status = 0 ] || { echo "ebpf-check: run 'make ebpf-generate' and commit the result"; exit 1; }

# The tests run only on BPF objects that match their sources.
test: ebpf-check

# The tracing test binary, for the overhead benchmark on the GPU machine
# (docs/TRACING.md), next to what `make gpu-binaries` carries.
.PHONY: trace-gpu-binaries
trace-gpu-binaries: gpu-binaries
	$(GO) test -c -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/trace.test ./$(EBPF_DIR)

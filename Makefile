# gpreempt — see README.md.
GO      ?= go
BIN     ?= bin
CARRY   ?= .carry
PKGS    := ./...
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

.PHONY: all build test vet fuzz gpu-test gpu-binaries benchmarks man clean install soak-hostile

all: build

# One version for every artefact: the release in internal/version/VERSION,
# and the git revision, its time and whether the tree has changes, linked in
# with -X so that builds under -buildvcs=false say where they came from too.
# Outside a git checkout the revision is left unknown.
VERSION     := $(shell cat internal/version/VERSION)
GIT_REV     := $(shell git rev-parse HEAD 2>/dev/null)
GIT_TIME    := $(shell git log -1 --format=%cI 2>/dev/null)
GIT_DIRTY   := $(shell [ -z "$(GIT_REV)" ] || { [ -z "$$(git status --porcelain 2>/dev/null)" ] && echo false || echo true; })
VERSION_PKG := github.com/gpreempt/gpreempt/internal/version
VERSION_LDFLAGS := $(if $(GIT_REV),-X $(VERSION_PKG).revision=$(GIT_REV) -X $(VERSION_PKG).revTime=$(GIT_TIME) -X $(VERSION_PKG).modified=$(GIT_DIRTY))
LDFLAGS     ?=
GO_LDFLAGS  := -ldflags='$(strip $(VERSION_LDFLAGS) $(LDFLAGS))'

# Each subsystem's own targets (ebpf, patches, ...) live in mk/.
-include mk/*.mk

# c-shared also writes cgo's own header (bin/libgpreempt.h): the API's
# header is include/gpreempt.h, so that one is removed.
build:
	$(GO) build $(GO_LDFLAGS) -o $(BIN)/ ./cmd/gpreemptctl ./cmd/gpreempt-bench ./cmd/gpreemptd
	$(GO) build $(GO_LDFLAGS) -buildmode=c-shared -o $(BIN)/libgpreempt.so ./cmd/libgpreempt
	rm -f $(BIN)/libgpreempt.h

# gofmt, go vet, staticcheck (pinned in go.mod's tool block), no build
# output (an executable, library or archive) tracked by git, the tracked tree
# small and free of raw results, the manual (docs/*.md) citing no commit, SLO mode's
# controller under 1,000 lines without its tests and simulator (one a newcomer
# can read whole), no two folders importing each other and no package over
# 3,000 lines without tests (gpreemptd's own over 1,500; docs/DESIGN.md).
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	@n=$$(cat $$(ls internal/slo/*.go | grep -v -e '_test\.go$$' -e '/sim\.go$$') | wc -l); \
	  if [ "$$n" -ge 1000 ]; then echo "internal/slo: $$n lines without tests and simulator, want under 1000"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	$(GO) run ./internal/tools/buildoutputs
	$(GO) run ./internal/tools/treecheck
	$(GO) run ./internal/tools/importcheck

# What CI runs (.ci/run): gofmt check and vet, then every test. GPU tests skip without a GPU;
# the skipped tests are listed at the end with the reason each gave. The
# Kubernetes e2e runs with the others (mk/k8s.mk; K8S_E2E=0 skips it), and
# so does the test of gpreemptd's image, built first (mk/image.mk;
# IMAGE_TEST=0 skips it).
# examples/go-lc-server is a module of its own, built as another module would
# build against prepreempt (its replace points here).
EXAMPLE := examples/go-lc-server
test: vet
	@assets=; if [ "$(K8S_E2E)" = 1 ]; then assets=$$(hack/k8s/build.sh) || { echo "test: building kube-apiserver/etcd for the Kubernetes e2e failed (K8S_E2E=0 leaves it out)"; exit 1; }; fi; \
	image=; if [ "$(IMAGE_TEST)" = 1 ]; then $(MAKE) --no-print-directory image >/dev/null || { echo "test: make image failed (IMAGE_TEST=0 leaves the image test out)"; exit 1; }; image=$(IMAGE_ARCHIVE); fi; \
	echo "GPREEMPT_K8S_ASSETS=$$assets GPREEMPT_IMAGE=$$image $(GO) run ./internal/tools/testreport -count=1 $(PKGS)"; \
	GPREEMPT_K8S_ASSETS=$$assets GPREEMPT_IMAGE=$$image $(GO) run ./internal/tools/testreport -count=1 $(PKGS)
	cd $(EXAMPLE) && $(GO) build -o /dev/null . && $(GO) vet ./...

# Manual pages generated from the command definitions: gpreemptctl(8),
# gpreemptd(8), gpreempt-bench(1).
# Read one with: man $(BIN)/man/gpreemptctl.8
man:
	$(GO) run ./internal/tools/genman $(BIN)/man

# A short run of every fuzz target (each decoder of outside bytes).
FUZZ_TIME ?= 10s
# Minimising a new failing input is bounded too: unbounded, it once took 20 s
# of a 10 s budget and left 17 executions.
FUZZ_MINIMIZE_TIME ?= 2s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZ_TIME) -fuzzminimizetime $(FUZZ_MINIMIZE_TIME) $$pkg || exit 1; \
	  done; \
	done

# The hostile-client soak (test/soak, docs/DAEMON.md "Hostile clients"):
# gpreemptd in scan mode, two uids attacking its socket and metrics port,
# a third measuring its /v1/class latency. As root (it makes three users);
# no GPU. SOAK_DURATION=5m for the figures in docs/DAEMON.md.
SOAK_DURATION ?= 5m
soak-hostile:
	$(GO) build -o $(BIN)/ ./cmd/gpreemptd
	SOAK_HOSTILE=1 SOAK_DURATION=$(SOAK_DURATION) GPREEMPTD_BIN=$(abspath $(BIN))/gpreemptd \
	  $(GO) test ./test/soak -run '^TestHostileSoak$$' -count=1 -v -timeout 60m

# Binaries and test binaries to carry to the GPU machine (no Go there),
# without symbol tables: the device call carries at most 64 MiB.
# libgpreempt.so keeps its symbols (uprobes find the hint API by name).
CARRY_LDFLAGS ?= -s -w $(VERSION_LDFLAGS)
gpu-binaries: build
	mkdir -p $(CARRY)
	$(GO) build -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/ ./cmd/gpreemptctl ./cmd/gpreempt-bench ./cmd/gpreemptd
	cd $(EXAMPLE) && $(GO) build -ldflags='$(CARRY_LDFLAGS)' -o ../../$(CARRY)/go-lc-server .
	cp $(BIN)/libgpreempt.so $(CARRY)/
	$(GO) test -c -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/tsg.test ./tsg
	$(GO) test -c -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/prepreempt.test ./prepreempt
	$(GO) test -c -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/gpu.test ./internal/gpu
	$(GO) test -c -ldflags='$(CARRY_LDFLAGS)' -o $(CARRY)/kernels.test ./internal/kernels

# On the GPU machine, from the carried binaries: the GPU tests and the
# control-cost benchmarks (see docs/GPU-RESULTS.md).
gpu-test:
	cd tsg && ../$(CARRY)/tsg.test -test.v -test.run GPU -test.bench GPU -test.benchtime 200x
	cd internal/gpu && ../../$(CARRY)/gpu.test -test.v
	cd prepreempt && ../$(CARRY)/prepreempt.test -test.v -test.run GPU
	cd internal/kernels && ../../$(CARRY)/kernels.test -test.v -test.run GPU

# On the GPU machine, as root, from the carried binaries: the whole benchmark
# matrix, five interleaved repetitions, results into docs/results/ (the raw
# JSON stays local: .gitignore), the generated part of docs/BENCHMARKS.md rewritten. Every kernel LC run measures
# at least 5000 requests (~18 s at 3.5 ms); about 25 minutes with the PyTorch
# scenarios (run them separately with BENCH_SCENARIOS where one command may
# not take that long).
BENCH_SCENARIOS ?= standalone,defaults,be-200us,be-1us,be-only,be-ratio:3000us:1000us,be-ratio:1000us:1000us,pytorch-eager-standalone,pytorch-eager-be-1ms,pytorch-eager-be-only,pytorch-standalone,pytorch,pytorch-be-1us,pytorch-be-only
BENCH_DURATION  ?= 8s
BENCH_REPEAT    ?= 5
BENCH_OUT       ?= /tmp/gpreempt-bench
benchmarks:
	$(CARRY)/gpreempt-bench run --gpreemptctl $(CARRY)/gpreemptctl \
	  --scenarios $(BENCH_SCENARIOS) --duration $(BENCH_DURATION) --repeat $(BENCH_REPEAT) --out $(BENCH_OUT)
	cp $(BENCH_OUT)/cdf.png docs/results/bench-h100-cdf.png
	cp $(BENCH_OUT)/timeline.png docs/results/bench-h100-timeline.png
	gzip -9c $(BENCH_OUT)/results.json > docs/results/bench-h100.json.gz
	{ cat $(BENCH_OUT)/results.md; echo; echo '![LC latency CDF](results/bench-h100-cdf.png)'; } > $(BENCH_OUT)/section.md
	awk -v sec=$(BENCH_OUT)/section.md '/<!-- results:end -->/{while((getline l < sec)>0) print l; skip=0} !skip{print} /<!-- results:begin -->/{skip=1}' \
	  docs/BENCHMARKS.md > $(BENCH_OUT)/BENCHMARKS.md && mv $(BENCH_OUT)/BENCHMARKS.md docs/BENCHMARKS.md

# Install the binaries, the library, the manual pages, gpreemptd's unit, an
# example policy (never over an existing one) and the manual (docs/*.md; a
# link that leaves it points at the release's source). Honours PREFIX and
# DESTDIR, as packagers expect: make install DESTDIR=/tmp/pkg PREFIX=/usr
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
DOCDIR     ?= $(PREFIX)/share/doc/gpreempt
MANDIR     ?= $(PREFIX)/share/man
SOURCE_URL ?= https://github.com/gpreempt/gpreempt/blob/v$(VERSION)
# The binaries and pages are built first only where missing, so that `make
# build man && sudo make install` needs no Go toolchain under sudo.
INSTALLED := $(BIN)/gpreemptctl $(BIN)/gpreemptd $(BIN)/gpreempt-bench $(BIN)/libgpreempt.so
MANPAGES  := $(BIN)/man/gpreemptctl.8 $(BIN)/man/gpreemptd.8 $(BIN)/man/gpreempt-bench.1
$(INSTALLED) &:
	$(MAKE) build
$(MANPAGES) &:
	$(MAKE) man
install: $(INSTALLED) $(MANPAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/gpreempt $(DESTDIR)$(DOCDIR) \
	  $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man1
	install -m 0755 $(BIN)/gpreemptctl $(BIN)/gpreemptd $(BIN)/gpreempt-bench $(DESTDIR)$(BINDIR)/
	install -m 0644 $(BIN)/man/gpreemptctl.8 $(BIN)/man/gpreemptd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 $(BIN)/man/gpreempt-bench.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0755 $(BIN)/libgpreempt.so $(DESTDIR)$(LIBDIR)/
	sed 's|/usr/local/bin/|$(BINDIR)/|g; s|/etc/gpreempt/|$(SYSCONFDIR)/gpreempt/|g; s|/usr/share/doc/gpreempt/|$(DOCDIR)/|g' \
	  deploy/systemd/gpreemptd.service > $(DESTDIR)$(UNITDIR)/gpreemptd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/gpreemptd.service
	test -e $(DESTDIR)$(SYSCONFDIR)/gpreempt/gpreemptd.yaml || install -m 0644 deploy/gpreemptd.yaml $(DESTDIR)$(SYSCONFDIR)/gpreempt/gpreemptd.yaml
	for f in docs/*.md; do \
	  sed -E 's#\]\(\.\./#]($(SOURCE_URL)/#g; s#\]\(results/#]($(SOURCE_URL)/docs/results/#g' $$f > $(DESTDIR)$(DOCDIR)/$$(basename $$f) && \
	  chmod 0644 $(DESTDIR)$(DOCDIR)/$$(basename $$f) || exit 1; \
	done

clean:
	rm -rf $(BIN) $(CARRY)

# Kubernetes: the end-to-end test of the node agent against a real
# kube-apiserver and etcd, and the plain manifests rendered from the chart.
# Included by the top Makefile.

# hack/k8s/build.sh builds kube-apiserver and etcd from the Go module proxy
# once per version into $(K8S_CACHE)/<version> (cold: ~5 min and ~2 GB of
# memory on 2 cores; warm: nothing to do) and prints that directory.
K8S_CACHE ?= $(HOME)/.cache/gpreempt/k8s
export GPREEMPT_K8S_CACHE := $(K8S_CACHE)
# make test runs the Kubernetes e2e too; K8S_E2E=0 leaves it out (the test
# then skips, saying why).
K8S_E2E ?= 1

.PHONY: k8s-assets e2e-k8s k8s-manifests

k8s-assets:
	@hack/k8s/build.sh

# The agent against a real API server: pods on this node and another,
# processes in kubelet-named cgroups (root and cgroup v2 needed), classes
# applied on the fake RM, Events, the chart's manifests dry-run applied.
e2e-k8s:
	assets=$$(hack/k8s/build.sh) && GPREEMPT_K8S_ASSETS=$$assets $(GO) test -count=1 -v ./test/e2e/k8s/

# deploy/kubernetes/gpreempt.yaml from deploy/helm/gpreempt, and the same with
# request tracing on for the e2e test (test/e2e/k8s/testdata).
k8s-manifests:
	$(GO) test ./hack/helmtemplate -update

# Everything scripts/gpu-run-kube.sh needs on the GPU machine (no Go there,
# no network), xz -9 compressed into one carried folder: kube-apiserver and
# etcd from the cache, kubecp (internal/tools/kubecp: starts them as the e2e
# test does and creates the pods), and gpreemptctl, gpreemptd and
# gpreempt-bench. Uncompressed those three are 85 MB, beyond the 64 MiB a
# device call carries; see docs/KUBERNETES.md for the sizes. Carry .k8s
# alone (not .carry).
K8S_CARRY ?= .k8s
.PHONY: k8s-carry
k8s-carry:
	assets=$$(hack/k8s/build.sh) && mkdir -p $(K8S_CARRY)/bin && \
	  for b in kube-apiserver etcd; do \
	    [ $(K8S_CARRY)/$$b.xz -nt $$assets/$$b ] || xz -9 -T0 -c $$assets/$$b > $(K8S_CARRY)/$$b.xz || exit 1; \
	  done
	$(GO) build -ldflags='$(CARRY_LDFLAGS)' -o $(K8S_CARRY)/bin/ ./internal/tools/kubecp ./cmd/gpreemptctl ./cmd/gpreempt-bench ./cmd/gpreemptd
	for b in kubecp gpreemptctl gpreempt-bench gpreemptd; do xz -9 -T0 -c $(K8S_CARRY)/bin/$$b > $(K8S_CARRY)/$$b.xz || exit 1; done
	rm -rf $(K8S_CARRY)/bin
	@du -b $(K8S_CARRY)/*.xz; du -cb $(K8S_CARRY)/*.xz | tail -1

# gpreemptd's OCI image for the DaemonSet (deploy/helm/gpreempt), built
# without a container daemon by hack/image/build.sh: the binaries built
# here on a base of Debian packages (glibc), as an OCI layout
# ($(IMAGE_DIR)/oci) and an oci-archive ($(IMAGE_ARCHIVE)) tagged with the
# release version. Every time in it is SOURCE_DATE_EPOCH (the last
# commit's), so a clean tree builds the same digest again.
# docs/KUBERNETES.md says how to push it (skopeo) or import it (ctr).
IMAGE_REPO    ?= ghcr.io/gpreempt/gpreemptd
IMAGE_TAG     ?= $(VERSION)
IMAGE_DIR     ?= $(BIN)/image
IMAGE_ARCHIVE := $(IMAGE_DIR)/gpreemptd-$(IMAGE_TAG).oci.tar
IMAGE_DEBS    ?= libc6 libgcc-s1 gcc-12-base
# What the image test unpacks and inspects it with (make deps installs them).
IMAGE_DEPS    := umoci skopeo
# make test builds the image and runs its test (test/image); IMAGE_TEST=0
# leaves it out (the test then skips, saying why).
IMAGE_TEST    ?= 1
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

.PHONY: image
image:
	GO=$(GO) VERSION_LDFLAGS='$(VERSION_LDFLAGS)' SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) IMAGE_DEBS='$(IMAGE_DEBS)' \
	  hack/image/build.sh $(IMAGE_DIR) $(IMAGE_TAG) $(IMAGE_REPO):$(IMAGE_TAG)

# Driver patch series (patches/<branch>/, see docs/PATCHES.md) and the
# kernel modules built from them (kmod/).
#
#   make patch-check SYSSRC=... SYSOUT=...
#                                    apply every series to its base tag and
#                                    compile the objects it touches (the
#                                    kernel-open ones against those kernel
#                                    headers; default: the running kernel's)
#   make patch-check OGKM_TREE_580=/path/to/tree   use a tree instead of the tag
#   make kmod-build SYSSRC=... SYSOUT=...          full modules, every branch
#   make kmod-build-580 ...                        one branch
#
# Tags come from OGKM_MIRROR: a local git repository holding the upstream
# tags, or the upstream URL (cloned shallowly per tag).

PATCH_BRANCHES ?= $(patsubst patches/%/series,%,$(wildcard patches/*/series))
OGKM_MIRROR    ?= https://github.com/NVIDIA/open-gpu-kernel-modules.git
KMOD_WORK      ?= $(or $(TMPDIR),/tmp)/gpreempt-kmod
KMOD_JOBS      ?= $(shell nproc)
KMOD           := kmod/gpreempt-kmod.sh

# The tag a branch's series was made on: the "# base:" line of its series.
patch-base = $(shell sed -n 's/^\# base: *//p' patches/$(1)/series)
# What a branch is applied to: OGKM_TREE_<branch> if set, else its base tag.
patch-target = $(or $(OGKM_TREE_$(1)),$(call patch-base,$(1)))

.PHONY: patch-check kmod-build patch-check-refuse

patch-check: $(addprefix patch-check-,$(PATCH_BRANCHES)) patch-check-refuse

patch-check-%:
	rm -rf $(KMOD_WORK)/check-$*
	OGKM_MIRROR=$(OGKM_MIRROR) $(KMOD) --check --jobs $(KMOD_JOBS) \
	  --work $(KMOD_WORK)/check-$* \
	  $(if $(SYSSRC),--syssrc $(SYSSRC)) $(if $(SYSOUT),--sysout $(SYSOUT)) \
	  $(call patch-target,$*)

# A driver branch without a series must be refused before anything is
# fetched or built.
patch-check-refuse:
	@out=$$($(KMOD) --check --work $(KMOD_WORK)/refuse 575.64.05 2>&1); rc=$$?; \
	if [ $$rc -eq 0 ] || ! echo "$$out" | grep -q 'no gpreempt patch series'; then \
	  echo "$(KMOD) did not refuse 575.64.05: rc=$$rc: $$out"; exit 1; fi; \
	echo "refused as expected: $$out"

kmod-build: $(addprefix kmod-build-,$(PATCH_BRANCHES))

kmod-build-%:
	rm -rf $(KMOD_WORK)/build-$*
	OGKM_MIRROR=$(OGKM_MIRROR) $(KMOD) --jobs $(KMOD_JOBS) --work $(KMOD_WORK)/build-$* \
	  $(if $(SYSSRC),--syssrc $(SYSSRC)) $(if $(SYSOUT),--sysout $(SYSOUT)) \
	  $(call patch-target,$*)

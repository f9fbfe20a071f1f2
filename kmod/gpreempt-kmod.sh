#!/usr/bin/env bash
# gpreempt-kmod.sh: patch NVIDIA's open GPU kernel modules with gpreempt's
# channel-group escapes (patches/<branch>/), build them, and optionally
# install them. See docs/PATCHES.md.
#
#   kmod/gpreempt-kmod.sh [options] <TREE-PATH | TAG>
#
# TREE-PATH is an unpacked NVIDIA/open-gpu-kernel-modules tree; TAG is an
# upstream tag (e.g. 580.142) read from --mirror. The version is read from
# the tree's version.mk and picks patches/<major>/series; a version whose
# branch has no series is refused. The tree is copied to --work first, so
# the source is never modified.
#
# Steps, each one only if the previous succeeded:
#   apply    always (every patch is dry-run first)
#   check    --check: compile only the objects the series touches (those
#            under kernel-open/ need kernel headers: --syssrc/--sysout or
#            the running kernel's)
#   build    default: make modules (pass --no-build to stop after apply)
#   install  --install: make modules_install + depmod. Root only, asks first
#            unless --yes. It never unloads or loads a module.
#   dkms     --dkms: stage the patched tree in /usr/src and dkms add/build/
#            install it. Root only, asks first unless --yes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PATCHES=$ROOT/patches
MIRROR=${OGKM_MIRROR:-https://github.com/NVIDIA/open-gpu-kernel-modules.git}
WORK=
JOBS=$(nproc 2>/dev/null || echo 1)
SYSSRC=${SYSSRC:-}
SYSOUT=${SYSOUT:-}
MODE=build
INSTALL=no
DKMS=no
YES=no

die() { echo "gpreempt-kmod: $*" >&2; exit 1; }
say() { echo "gpreempt-kmod: $*" >&2; }

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
	cat <<EOF
Options:
  --mirror REPO    git repository holding the upstream tags (\$OGKM_MIRROR;
                   default $MIRROR)
  --work DIR       where the patched tree is made (default ./_kmod/<version>)
  --check          apply, then compile only the objects the series touches
  --no-build       apply only
  --jobs N         make -j (default $JOBS)
  --syssrc DIR     kernel source/headers (SYSSRC; Debian: .../linux-headers-<v>-common)
  --sysout DIR     kernel build output (SYSOUT; Debian: .../linux-headers-<v>-amd64)
  --install        after the build, install the modules (root)
  --dkms           register the patched tree with DKMS instead (root)
  --yes            do not ask before --install/--dkms
EOF
}

TARGET=
while [ $# -gt 0 ]; do
	case $1 in
	--mirror) MIRROR=$2; shift 2 ;;
	--work) WORK=$2; shift 2 ;;
	--check) MODE=check; shift ;;
	--no-build) MODE=apply; shift ;;
	--jobs) JOBS=$2; shift 2 ;;
	--syssrc) SYSSRC=$2; shift 2 ;;
	--sysout) SYSOUT=$2; shift 2 ;;
	--install) INSTALL=yes; shift ;;
	--dkms) DKMS=yes; shift ;;
	--yes) YES=yes; shift ;;
	-h|--help) usage; exit 0 ;;
	-*) die "unknown option $1 (see --help)" ;;
	*) [ -z "$TARGET" ] || die "one tree or tag, not '$TARGET' and '$1'"; TARGET=$1; shift ;;
	esac
done
[ -n "$TARGET" ] || { usage >&2; exit 2; }
if [ "$INSTALL" = yes ] || [ "$DKMS" = yes ]; then
	[ "$MODE" = build ] || die "--install and --dkms need a build (drop --check/--no-build)"
	[ "$INSTALL$DKMS" != yesyes ] || die "--install or --dkms, not both"
fi

# tree_version DIR prints NVIDIA_VERSION from DIR/version.mk.
tree_version() {
	[ -f "$1/version.mk" ] || die "$1: no version.mk; not an open-gpu-kernel-modules tree"
	sed -n 's/^NVIDIA_VERSION *= *\([0-9][0-9.]*\) *$/\1/p' "$1/version.mk" | head -n1
}

# Find the version first, before copying anything, so that a version with
# no series is refused at once.
if [ -d "$TARGET" ]; then
	SRC=$(cd "$TARGET" && pwd)
	VERSION=$(tree_version "$SRC")
	[ ! -e "$SRC/src/nvidia/arch/nvalloc/unix/include/nv-gpreempt.h" ] ||
		die "$SRC already carries the gpreempt series"
else
	case $TARGET in
	[0-9]*.[0-9]*) VERSION=$TARGET ;;
	*) die "'$TARGET' is neither a directory nor a version tag" ;;
	esac
	SRC=
fi
[ -n "$VERSION" ] || die "cannot read the driver version of $TARGET"
BRANCH=${VERSION%%.*}
SERIES=$PATCHES/$BRANCH/series
if [ ! -f "$SERIES" ]; then
	have=$(cd "$PATCHES" && for d in */series; do printf "%s " "${d%/series}"; done)
	have=${have% }
	die "no gpreempt patch series for NVIDIA $VERSION (branch $BRANCH); series exist for: ${have:-none}. Refusing."
fi
BASE=$(sed -n 's/^# base: *//p' "$SERIES" | head -n1)
if [ -n "$BASE" ] && [ "$BASE" != "$VERSION" ]; then
	say "warning: the $BRANCH series was made and tested on $BASE, this tree is $VERSION; it is applied only if every hunk fits"
fi

WORK=${WORK:-$PWD/_kmod/$VERSION}
[ ! -e "$WORK" ] || [ -z "$(ls -A "$WORK" 2>/dev/null)" ] || die "$WORK exists and is not empty; remove it or pass --work"
mkdir -p "$WORK"
if [ -n "$SRC" ]; then
	say "copying $SRC to $WORK"
	(cd "$SRC" && tar --exclude=.git --exclude=_out -cf - .) | (cd "$WORK" && tar -xf -)
else
	say "extracting $VERSION from $MIRROR"
	if [ -d "$MIRROR" ]; then
		git -C "$MIRROR" archive --format=tar "refs/tags/$VERSION" | (cd "$WORK" && tar -xf -) ||
			die "tag $VERSION not found in $MIRROR"
	else
		tmp=$(mktemp -d)
		git clone -q --depth 1 --branch "$VERSION" "$MIRROR" "$tmp/src" || die "cannot fetch tag $VERSION from $MIRROR"
		(cd "$tmp/src" && git archive --format=tar HEAD) | (cd "$WORK" && tar -xf -)
		rm -rf "$tmp"
	fi
fi
got=$(tree_version "$WORK")
[ "$got" = "$VERSION" ] || die "tree says $got, expected $VERSION"
[ ! -e "$WORK/src/nvidia/arch/nvalloc/unix/include/nv-gpreempt.h" ] ||
	die "$TARGET already carries the gpreempt series"

# apply: every patch is dry-run before it is applied, so a misfit stops the
# run before that patch changes anything.
touched=()
while read -r p; do
	case $p in ''|'#'*) continue ;; esac
	f=$PATCHES/$BRANCH/$p
	[ -f "$f" ] || die "series names $p, which is missing"
	patch -d "$WORK" -p1 --forward --batch --dry-run -s <"$f" >/dev/null ||
		die "$p does not apply to $VERSION"
	patch -d "$WORK" -p1 --forward --batch -s <"$f" >/dev/null
	say "applied $p"
	while read -r t; do touched+=("$t"); done < <(sed -n 's@^+++ b/@@p' "$f")
done <"$SERIES"

if [ "$MODE" = apply ]; then
	say "patched tree: $WORK"
	exit 0
fi

# kernel_dirs sets KSRC and KOUT, the kernel source and build trees that
# kernel-open is compiled against: --syssrc/--sysout, else the running
# kernel's /lib/modules/<release>/{source,build}, as kernel-open/Makefile
# picks them.
kernel_dirs() {
	local modlib=/lib/modules/${KERNEL_UNAME:-$(uname -r)}
	KSRC=$SYSSRC
	if [ -z "$KSRC" ]; then
		if [ -d "$modlib/source" ]; then KSRC=$modlib/source; else KSRC=$modlib/build; fi
	fi
	KOUT=${SYSOUT:-$KSRC}
	if [ -z "$SYSOUT" ] && [ -z "$SYSSRC" ] && [ -d "$modlib/build" ]; then KOUT=$modlib/build; fi
	[ -f "$KSRC/Makefile" ] && [ -f "$KOUT/.config" ] ||
		die "kernel-open objects need kernel headers: none at '$KSRC' / '$KOUT'; pass --syssrc/--sysout (SYSSRC/SYSOUT)"
}

if [ "$MODE" = check ]; then
	# The RM core (src/nvidia) compiles one object at a time from its own
	# makefile; kernel-open objects through Kbuild, one target each, which
	# first runs NVIDIA's conftest for that kernel. Headers are covered by
	# the objects that include them.
	objs=()
	kobjs=()
	for t in "${touched[@]}"; do
		case $t in
		src/nvidia/*.c) objs+=("_out/Linux_x86_64/$(basename "${t%.c}").o") ;;
		kernel-open/*.c) kobjs+=("${t#kernel-open/}") ;;
		*.h|*.mk) ;;
		*) die "--check cannot compile $t alone; run a full build" ;;
		esac
	done
	[ ${#objs[@]} -gt 0 ] || [ ${#kobjs[@]} -gt 0 ] || die "the series touches no C file"
	if [ ${#objs[@]} -gt 0 ]; then
		make -C "$WORK/src/nvidia" -j"$JOBS" "${objs[@]}" >&2
		say "compiled ${objs[*]} for $VERSION"
	fi
	if [ ${#kobjs[@]} -gt 0 ]; then
		kernel_dirs
		kobjs=("${kobjs[@]/%.c/.o}")
		mods=$(printf '%s\n' "${kobjs[@]}" | cut -d/ -f1 | sort -u | tr '\n' ' ')
		arch=$(uname -m | sed -e 's/i.86/i386/' -e 's/aarch64/arm64/')
		make -C "$KSRC" KBUILD_OUTPUT="$KOUT" M="$WORK/kernel-open" ARCH="$arch" \
			NV_KERNEL_SOURCES="$KSRC" NV_KERNEL_OUTPUT="$KOUT" \
			NV_KERNEL_MODULES="${mods% }" -j"$JOBS" "${kobjs[@]}" >&2
		say "compiled kernel-open/{${kobjs[*]}} for $VERSION against $KOUT"
	fi
	exit 0
fi

mkargs=(-j"$JOBS")
[ -z "$SYSSRC" ] || mkargs+=(SYSSRC="$SYSSRC")
[ -z "$SYSOUT" ] || mkargs+=(SYSOUT="$SYSOUT")
say "building: make ${mkargs[*]} modules in $WORK"
start=$(date +%s)
make -C "$WORK" "${mkargs[@]}" modules
say "built $VERSION in $(( $(date +%s) - start )) s:"
ls -l "$WORK"/kernel-open/*.ko >&2

confirm() {
	[ "$YES" = yes ] && return 0
	[ -t 0 ] || die "$1: not confirmed (no terminal); pass --yes"
	read -r -p "gpreempt-kmod: $1 [y/N] " a
	[ "$a" = y ] || [ "$a" = Y ] || die "not confirmed"
}

if [ "$INSTALL" = yes ]; then
	[ "$(id -u)" = 0 ] || die "--install needs root"
	confirm "install the gpreempt-patched NVIDIA $VERSION modules over the installed ones"
	make -C "$WORK" "${mkargs[@]}" modules_install
	depmod -a "${KERNEL_UNAME:-$(uname -r)}"
	say "installed. The running driver is unchanged until the nvidia modules are"
	say "unloaded and reloaded (or the machine reboots); the user-space driver must be $VERSION."
fi

if [ "$DKMS" = yes ]; then
	[ "$(id -u)" = 0 ] || die "--dkms needs root"
	command -v dkms >/dev/null || die "dkms is not installed"
	dst=/usr/src/nvidia-gpreempt-$VERSION
	[ ! -e "$dst" ] || die "$dst exists; dkms remove nvidia-gpreempt/$VERSION --all and delete it first"
	confirm "register the gpreempt-patched NVIDIA $VERSION modules with DKMS (they replace nvidia.ko)"
	mkdir -p "$dst"
	(cd "$WORK" && tar --exclude=_out -cf - .) | (cd "$dst" && tar -xf -)
	sed "s/@VERSION@/$VERSION/g" "$ROOT/kmod/dkms.conf" >"$dst/dkms.conf"
	dkms add -m nvidia-gpreempt -v "$VERSION"
	dkms build -m nvidia-gpreempt -v "$VERSION"
	dkms install -m nvidia-gpreempt -v "$VERSION"
fi

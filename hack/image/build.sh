#!/usr/bin/env bash
# Builds gpreemptd's OCI image without a container daemon (make image):
#
#   1. gpreemptd and gpreemptctl, built here (cgo: go-nvml dlopens the
#      host's libnvidia-ml.so.1, which needs glibc's dynamic loader);
#   2. a base of Debian packages, glibc and what it depends on, fetched
#      with apt-get download and unpacked with dpkg -x (no maintainer
#      scripts run; their control files go to /var/lib/dpkg/status.d so
#      that scanners see the versions);
#   3. internal/tools/ociimage writes both layers, the config, manifest and
#      index, every time set to SOURCE_DATE_EPOCH.
#
# Usage: hack/image/build.sh OUTDIR TAG NAME   (the Makefile passes them)
# Environment: GO, VERSION_LDFLAGS, SOURCE_DATE_EPOCH, IMAGE_DEBS,
# IMAGE_DEB_CACHE (where the .debs are kept between builds).
set -euo pipefail
out=$1 tag=$2 name=$3
GO=${GO:-go}
debs=${IMAGE_DEBS:-libc6 libgcc-s1 gcc-12-base}
cache=${IMAGE_DEB_CACHE:-$HOME/.cache/gpreempt/debs}
[ -n "${SOURCE_DATE_EPOCH:-}" ] || { echo "image: set SOURCE_DATE_EPOCH (the Makefile uses the time of the last commit)" >&2; exit 1; }
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$cache"

# 1. The binaries: -trimpath so that the checkout's path is not in them.
CGO_ENABLED=1 "$GO" build -trimpath -ldflags "-s -w ${VERSION_LDFLAGS:-}" -o "$work/bin/" ./cmd/gpreemptd ./cmd/gpreemptctl

# 2. The base. apt-get download takes the candidate version of each
# package; with no package lists yet it updates them once.
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
  { echo "image: needs apt-get and dpkg-deb (a Debian system)" >&2; exit 1; }
files=()
for p in $debs; do
  v=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^  Candidate: //p')
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    apt-get update -qq >/dev/null
    v=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
  fi
  [ -n "$v" ] && [ "$v" != "(none)" ] || { echo "image: no Debian package $p" >&2; exit 1; }
  f=$cache/${p}_${v//:/%3a}_$arch.deb
  [ -f "$f" ] || f=$cache/${p}_${v//:/%3a}_all.deb
  if [ ! -f "$f" ]; then
    # Stale package lists name a version the mirror no longer has:
    # update them once and take the new candidate.
    if ! (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "$p=$v" >/dev/null 2>&1); then
      apt-get update -qq >/dev/null
      v=$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')
      (cd "$cache" && apt-get download -qq -o APT::Sandbox::User=root "$p=$v" >/dev/null)
    fi
    f=$(ls "$cache"/"${p}"_"${v//:/%3a}"_*.deb | head -1)
  fi
  files+=("$f")
done
root=$work/base
mkdir -p "$root/var/lib/dpkg/status.d" "$root/etc" "$root/tmp" "$root/run" "$root/etc/gpreempt"
versions=()
for f in "${files[@]}"; do
  dpkg-deb -x "$f" "$root"
  p=$(dpkg-deb -f "$f" Package)
  dpkg-deb -f "$f" > "$root/var/lib/dpkg/status.d/$p"
  versions+=("$p=$(dpkg-deb -f "$f" Version)")
done
# Documentation, manual pages and locales are not needed to run.
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/lintian" "$root/usr/share/locale" \
  "$root/usr/lib/$(uname -m)-linux-gnu/gconv"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
. /etc/os-release 2>/dev/null || true
base_history="debian ${VERSION_CODENAME:-} packages: ${versions[*]}"

# 3. The image.
rev=$(git rev-parse HEAD 2>/dev/null || true)
ver=$(cat internal/version/VERSION)
"$GO" run ./internal/tools/ociimage \
  -base "$root" -base-history "$base_history" \
  -add "$work/bin/gpreemptd:/usr/bin/gpreemptd:755" \
  -add "$work/bin/gpreemptctl:/usr/bin/gpreemptctl:755" \
  -add "deploy/gpreemptd.yaml:/etc/gpreempt/gpreemptd.yaml:644" \
  -app-history "gpreemptd, gpreemptctl $ver (revision ${rev:-unknown}) and the example policy" \
  -layout "$out/oci" -archive "$out/gpreemptd-$tag.oci.tar" -tag "$tag" -name "$name" -arch "$arch" \
  -entrypoint /usr/bin/gpreemptd \
  -env PATH=/usr/bin:/bin -env NVIDIA_VISIBLE_DEVICES=all -env NVIDIA_DRIVER_CAPABILITIES=utility \
  -label "org.opencontainers.image.title=gpreemptd" -label "org.opencontainers.image.version=$ver" \
  -label "org.opencontainers.image.revision=${rev:-unknown}" -label "org.opencontainers.image.licenses=Apache-2.0" \
  -annotation "org.opencontainers.image.title=gpreemptd" -annotation "org.opencontainers.image.version=$ver" \
  -annotation "org.opencontainers.image.revision=${rev:-unknown}" \
  -annotation "org.opencontainers.image.base.name=debian:${VERSION_CODENAME:-} (${versions[*]})" |
  tee "$out/gpreemptd-$tag.txt"
sha256sum "$out/gpreemptd-$tag.oci.tar" | tee -a "$out/gpreemptd-$tag.txt"

#!/bin/sh
# Builds kube-apiserver and etcd for the Kubernetes end-to-end test from the Go module proxy
# and caches them by version outside the tree. Prints the directory that holds them.
#
# A cold build takes minutes (kube-apiserver: ~5 min and ~2 GB of memory on 2 cores); a warm
# one is a cache hit and does nothing. The binaries are never committed.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
version=$(sed -n "s/^[[:space:]]*k8s.io\/kubernetes \(v[0-9.]*\).*$/\1/p" "$here/go.mod")
etcd_version=$(sed -n "s/^[[:space:]]*go.etcd.io\/etcd\/server\/v3 \(v[0-9.]*\).*$/\1/p" "$here/go.mod")
cache=${GPREEMPT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpreempt/k8s}/$version
if [ -x "$cache/kube-apiserver" ] && [ -x "$cache/etcd" ]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$here"
echo "building kube-apiserver $version and etcd $etcd_version into $cache (minutes when cold)" >&2
go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version" \
	-o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
mv "$tmp/kube-apiserver" "$tmp/etcd" "$cache/"
echo "$cache"

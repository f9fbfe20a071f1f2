#!/usr/bin/env bash
# ab-binaries.sh REV [DIR]: REV's gpreemptd, gpreempt-bench and gpreemptctl, built by
# `make gpu-binaries` in a worktree of this repository, xz'd into DIR (default .gpu-b): the
# second build of an A/B, for gpu-run-lanes.sh's XZ_DIR<N>. The tree here is left as it is.
#
#   scripts/ab-binaries.sh exp/paired-judgement && make gpu-binaries && <xz .carry into .gpu>
#   DURATION=200s REP=1 REP1=1 NO_STANDALONE=1 XZ_DIR=.gpu XZ_DIR1=.gpu-b \
#     LANE0="scraped-fine:slo:590" LANE1="scraped-fine:slo:590" scripts/gpu-run-lanes.sh
set -eu
rev=${1:?usage: ab-binaries.sh REV [DIR]}
dir=$(realpath -m "${2:-$(git rev-parse --show-toplevel)/.gpu-b}") # DIR as given, from here
git rev-parse -q --verify "$rev^{commit}" > /dev/null || { echo "ab-binaries.sh: no commit $rev" >&2; exit 2; }
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" 2> /dev/null || rm -rf "$wt"; git worktree prune' EXIT
git worktree add -q --detach "$wt" "$rev"
make -s -C "$wt" gpu-binaries > /dev/null
mkdir -p "$wt/xz" "$dir" # all three or none: a failure leaves DIR as it was
for b in gpreemptd gpreempt-bench gpreemptctl; do xz -T2 -c "$wt/.carry/$b" > "$wt/xz/$b.xz"; done
mv -f "$wt"/xz/*.xz "$dir/"
echo "$dir: $(git rev-parse --short "$rev") ($rev)"

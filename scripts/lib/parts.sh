# shellcheck shell=bash
# Part selection and running, shared by the GPU scripts that run in parts
# (gpu-run-daemon.sh, gpu-run-slo.sh, gpu-run-self.sh, gpu-run-2gpu.sh).
# Sourced, not run. The sourcing script sets $W (its work folder) and
# defines pack (what goes to $OUT) and TIMEOUT_<PART> for each part.

# select_parts SCRIPT DEFAULT ALL [PART...] sets sel to " p1 p2 ... ": the
# parts named as arguments, else in $PARTS (space- or comma-separated),
# else DEFAULT; "all" is ALL. An unknown part exits 2.
select_parts() {
  local script=$1 default=$2 all=$3 p
  shift 3
  sel="${*:-${PARTS:-$default}}"
  sel=" ${sel//,/ } "
  case "$sel" in *" all "*) sel=" $all ";; esac
  for p in $sel; do
    case " $all " in *" $p "*) ;; *) echo "$script: unknown part '$p' (known: $all, all)" >&2; exit 2;; esac
  done
}

want() { case "$sel" in *" $1 "*) return 0;; esac; return 1; }

# part_var P [PREFIX]: the name PREFIX_<P> (TIMEOUT_<P> by default; a '-'
# in P as '_'); part_timeout P [PREFIX]: its value.
part_var() { local v="${2:-TIMEOUT}_${1^^}"; echo "${v//-/_}"; }
part_timeout() { local v; v=$(part_var "$@"); echo "${!v}"; }

# run_part P CMD... runs CMD in its own process group (set -m; its children
# stay in it) under part P's time limit; past it the whole group is killed.
# Then the results are packed at once.
run_part() {
  local p=$1 t rc pg
  shift
  t=$(part_timeout "$p")
  local t0=$SECONDS
  set -m
  "$@" &
  pg=$!
  set +m
  (
    for ((i = 0; i < t; i++)); do sleep 1; kill -0 "$pg" 2>/dev/null || exit 0; done
    echo "part $p: TIMED OUT after ${t}s; killed with every process it started" >> "$W/$p.txt"
    kill -TERM -- -"$pg" 2>/dev/null; sleep 5; kill -KILL -- -"$pg" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  local wd=$!
  wait "$pg"; rc=$?
  wait "$wd" 2>/dev/null
  echo "part $p: rc=$rc after $((SECONDS - t0)) s (limit ${t}s)" | tee -a "$W/parts.txt"
  pack
}

# pack_summary FILE... writes the FILEs of $W that exist, each under a
# "===== FILE" header, to $OUT/summary.txt (replaced whole, never half
# written).
pack_summary() {
  local f
  for f in "$@"; do
    [ -f "$W/$f" ] && { echo "===== $f"; cat "$W/$f"; echo; }
  done > "$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
}

# write_machine records what ran the parts (time, kernel, GPU, driver,
# torch) in $W/machine.txt and shows it.
write_machine() {
  {
    date -u; uname -r; nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  } > "$W/machine.txt" 2>&1
  cat "$W/machine.txt"
}

# bench_digest DIR LOG HEADING prints, from gpreempt-bench's DIR/results.md,
# the summary table, the paragraph that starts with HEADING and the errors;
# without a results.md, the end of the bench's LOG.
bench_digest() {
  local md=$1/results.md
  if [ -f "$md" ]; then
    sed -n '/^| scenario | reps/,/^$/p' "$md"
    awk -v h="$3" 'index($0, h) == 1 {f=1; print; next} f && /^- /{print; s=1; next} f && s{exit}' "$md"
    grep -E '\*\*error\*\*|run failed|warning' "$md" | head -20
  else
    echo "no results.md; the end of the bench's log:"; tail -20 "$2"
  fi
}

# copy_results DIR NAME puts DIR's results.md and gzipped results.json in
# $OUT as NAME-results.md and NAME-results.json.gz, those that exist.
copy_results() {
  [ -f "$1/results.md" ] && cp "$1/results.md" "$OUT/$2-results.md"
  [ -f "$1/results.json" ] && gzip -c "$1/results.json" > "$OUT/$2-results.json.gz"
}

# shellcheck shell=bash
# gpreemptd and the processes a GPU script starts beside it: starting the
# daemon, waiting for its socket or a worker's READY, polling its status,
# stopping what was started. Shared by the GPU scripts that run gpreemptd;
# sourced, not run. The sourcing script sets $C, the folder holding
# gpreemptd (.carry by default).

# wait_sock SOCK [PID [SECONDS]] returns once a socket is at SOCK, non-zero
# if none came within SECONDS (10) or PID exited first.
wait_sock() {
  local sock=$1 pid=${2:-} i n=$((${3:-10} * 4))
  for ((i = 0; i < n; i++)); do
    [ -S "$sock" ] && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}

# wait_ready LOG PID SECONDS returns once LOG has a line with READY (what
# the bench's workers print when their context is up), non-zero if PID
# exited or SECONDS passed first.
wait_ready() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q READY "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# stop_pids PID... sends SIGTERM, then SIGKILL to those still alive after
# 10 s, and reaps them.
stop_pids() {
  local p i alive
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "$@"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  return 0
}

# GPREEMPTD_CPUS, set by a script after sourcing this file, pins the
# daemons start_gpreemptd starts (taskset's CPU list); empty, they are not
# pinned. Cleared here so that the environment cannot pin them.
GPREEMPTD_CPUS=

# start_gpreemptd LOG POLICY SOCK MADDR [ARGS...] starts $C/gpreemptd on
# POLICY with its socket at SOCK, its metrics on MADDR and debug logs in
# LOG, ARGS added; DPID is its pid. It returns once the daemon listens,
# non-zero if it did not within 10 s or exited. A socket left at SOCK by a
# daemon killed earlier is removed first, so that the wait sees the new one.
start_gpreemptd() {
  local log=$1 pol=$2 sock=$3 maddr=$4
  shift 4
  mkdir -p "$(dirname "$sock")"
  rm -f "$sock"
  ${GPREEMPTD_CPUS:+taskset -c "$GPREEMPTD_CPUS"} "$C/gpreemptd" --config "$pol" --socket "$sock" --metrics-addr "$maddr" \
    --log-level debug "$@" > "$log" 2>&1 &
  DPID=$!
  wait_sock "$sock" "$DPID"
}

# poll_status SOCK PID prints a JSON line a second while PID lives:
# {"t": unix seconds, "status": GET /v1/status of the daemon on SOCK, null
# when it does not answer}. The bench records the status only while it
# measures; this covers a whole part.
poll_status() {
  while kill -0 "$2" 2>/dev/null; do
    echo "{\"t\": $(date +%s.%N), \"status\": $(curl -s --unix-socket "$1" http://d/v1/status || echo null)}"
    sleep 1
  done
}

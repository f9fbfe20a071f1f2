# shellcheck shell=bash
# Records when threads of a command name leave their CPU (sched_switch, with
# the kernel stack of each sleep S or wait D), are woken (sched_wakeup) and
# come back, for scripts/probe/offcpu.py to sum per thread. A switch in from
# an idle CPU is not always recorded (seen on Linux 6.18), so a sleep ends at
# its wakeup. In a tracefs instance of its own: the global trace and its
# settings are left alone. Stamps are CLOCK_MONOTONIC's, as the bench's.
# Sourced, not run; as root.
#   offcpu_start [COMM]   (python3 by default)
#   offcpu_stop FILE      (the raw trace, xz'd; the instance removed)

offcpu_start() {
  local comm=${1:-python3} t=/sys/kernel/tracing
  [ -e $t/instances ] || mount -t tracefs nodev $t
  OFFCPU_T=$t/instances/gpreempt-offcpu-$$
  mkdir "$OFFCPU_T" || return
  echo 0 > "$OFFCPU_T/tracing_on"
  echo 32768 > "$OFFCPU_T/buffer_size_kb" # a CPU's; a lane's 4 CPUs see most switches
  echo mono > "$OFFCPU_T/trace_clock"
  echo "prev_comm == \"$comm\" || next_comm == \"$comm\"" > "$OFFCPU_T/events/sched/sched_switch/filter"
  echo "stacktrace if prev_comm == \"$comm\" && prev_state & 3" > "$OFFCPU_T/events/sched/sched_switch/trigger"
  echo "comm == \"$comm\"" > "$OFFCPU_T/events/sched/sched_wakeup/filter"
  OFFCPU_COMM=$comm
  echo 1 > "$OFFCPU_T/events/sched/sched_switch/enable"; echo 1 > "$OFFCPU_T/events/sched/sched_wakeup/enable"
  echo 1 > "$OFFCPU_T/tracing_on"
}

offcpu_stop() {
  local e=$OFFCPU_T/events/sched/sched_switch
  echo 0 > "$OFFCPU_T/tracing_on"; echo 0 > "$e/enable"; echo 0 > "$OFFCPU_T/events/sched/sched_wakeup/enable"
  # overwritten events (the oldest, in overwrite mode)
  grep -h overrun "$OFFCPU_T"/per_cpu/cpu*/stats | awk '{o += $2} END {print "offcpu: events lost to full buffers:", o + 0}'
  xz -T2 -c "$OFFCPU_T/trace" > "$1"
  echo "!stacktrace if prev_comm == \"$OFFCPU_COMM\" && prev_state & 3" > "$e/trigger" # an instance with a trigger will not go
  rmdir "$OFFCPU_T"
}

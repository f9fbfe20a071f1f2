# shellcheck shell=bash
# Records when threads of a command name leave their CPU and come back
# (sched_switch), with the kernel stack of each sleep (S) or wait (D), for
# scripts/probe/offcpu.py to sum per thread. Sourced, not run; as root.
#   offcpu_start [COMM]   (python3 by default)
#   offcpu_stop FILE      (the raw trace, xz'd)
OFFCPU_T=/sys/kernel/tracing

offcpu_start() {
  local comm=${1:-python3} e=$OFFCPU_T/events/sched/sched_switch
  [ -e $OFFCPU_T/trace ] || mount -t tracefs nodev $OFFCPU_T
  echo 0 > $OFFCPU_T/tracing_on; echo > $OFFCPU_T/trace
  echo 32768 > $OFFCPU_T/buffer_size_kb # a CPU's; a lane's 4 CPUs see most switches
  echo "prev_comm == \"$comm\" || next_comm == \"$comm\"" > $e/filter
  echo "stacktrace if prev_comm == \"$comm\" && prev_state & 3" > $e/trigger
  OFFCPU_COMM=$comm
  echo 1 > $e/enable; echo 1 > $OFFCPU_T/tracing_on
}

offcpu_stop() {
  local e=$OFFCPU_T/events/sched/sched_switch
  echo 0 > $OFFCPU_T/tracing_on; echo 0 > $e/enable
  echo "!stacktrace if prev_comm == \"$OFFCPU_COMM\" && prev_state & 3" > $e/trigger
  echo 0 > $e/filter
  xz -T2 -c $OFFCPU_T/trace > "$1"; echo > $OFFCPU_T/trace
  grep -h . $OFFCPU_T/per_cpu/cpu*/stats 2>/dev/null | awk '/overrun/ {o += $2} END {print "offcpu: events lost to full buffers:", o + 0}'
}

# shellcheck shell=bash
# Records when threads of a command name leave their CPU (sched_switch, with
# the kernel stack of each sleep S or wait D), are woken (sched_wakeup) and
# come back, for scripts/probe/offcpu.py to sum per thread. A switch in from
# an idle CPU is not always recorded (seen on Linux 6.18), so a sleep ends at
# its wakeup. Sourced, not run; as root.
# Stamps are CLOCK_MONOTONIC's (trace_clock mono), as the bench's requests.
#   offcpu_start [COMM]   (python3 by default)
#   offcpu_stop FILE      (the raw trace, xz'd; the tracing settings as they were)
OFFCPU_T=/sys/kernel/tracing

offcpu_start() {
  local comm=${1:-python3} e=$OFFCPU_T/events/sched/sched_switch
  [ -e $OFFCPU_T/trace ] || mount -t tracefs nodev $OFFCPU_T
  OFFCPU_WAS=("$(cat $OFFCPU_T/tracing_on)" "$(cat $OFFCPU_T/buffer_size_kb)"
    "$(sed 's/.*\[\(.*\)\].*/\1/' $OFFCPU_T/trace_clock)")
  echo 0 > $OFFCPU_T/tracing_on; echo > $OFFCPU_T/trace
  echo 32768 > $OFFCPU_T/buffer_size_kb # a CPU's; a lane's 4 CPUs see most switches
  echo mono > $OFFCPU_T/trace_clock
  echo "prev_comm == \"$comm\" || next_comm == \"$comm\"" > $e/filter
  echo "stacktrace if prev_comm == \"$comm\" && prev_state & 3" > $e/trigger
  echo "comm == \"$comm\"" > $OFFCPU_T/events/sched/sched_wakeup/filter
  OFFCPU_COMM=$comm
  echo 1 > $e/enable; echo 1 > $OFFCPU_T/events/sched/sched_wakeup/enable; echo 1 > $OFFCPU_T/tracing_on
}

offcpu_stop() {
  local e=$OFFCPU_T/events/sched/sched_switch
  echo 0 > $OFFCPU_T/tracing_on; echo 0 > $e/enable; echo 0 > $OFFCPU_T/events/sched/sched_wakeup/enable
  echo 0 > $OFFCPU_T/events/sched/sched_wakeup/filter
  echo "!stacktrace if prev_comm == \"$OFFCPU_COMM\" && prev_state & 3" > $e/trigger
  echo 0 > $e/filter
  # overwritten events (the oldest, in overwrite mode): read before the buffer is cleared
  grep -h overrun $OFFCPU_T/per_cpu/cpu*/stats | awk '{o += $2} END {print "offcpu: events lost to full buffers:", o + 0}'
  xz -T2 -c $OFFCPU_T/trace > "$1"; echo > $OFFCPU_T/trace
  echo "${OFFCPU_WAS[2]}" > $OFFCPU_T/trace_clock; echo "${OFFCPU_WAS[1]}" > $OFFCPU_T/buffer_size_kb
  echo "${OFFCPU_WAS[0]}" > $OFFCPU_T/tracing_on
}

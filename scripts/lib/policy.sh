# shellcheck shell=bash
# gpreemptd policies that more than one GPU script runs. Sourced, not run.

# env_policy BE [pergpu] prints a policy that classes only the processes
# that say GPREEMPT_CLASS (the bench's daemon: workers), be at a timeslice
# of BE and lc at 5 s; the others are left alone (default: none).
# requests.default_max is lc, for class_from_env is capped at the request
# limit (none by default). pergpu puts the classing behind a rule on GPUs 0
# and 1 first, so that gpreemptd waits for NVML to list a process before
# classing it, and knows its GPU.
env_policy() {
  cat <<YAML
version: 1
classes:
  be: {timeslice: $1, interleave: low}
  lc: {timeslice: 5s, interleave: high}
default: none
rules:
YAML
  [ "${2:-}" = pergpu ] && cat <<'YAML'
  - name: from-env-on-a-gpu
    match: {gpu: [0, 1]}
    class_from_env: GPREEMPT_CLASS
YAML
  cat <<'YAML'
  - name: from-env
    class_from_env: GPREEMPT_CLASS
requests:
  default_max: lc
YAML
}

# gate_policy plain|pergpu [IDLE] prints gpu-run-gate.sh dgate's policy:
# env_policy's with BE at the driver's 2 ms and the request gate on, a hold
# ending after IDLE (25ms) without a launch.
gate_policy() {
  env_policy 2ms "$1"
  printf 'gate:\n  mode: on\n  idle: %s\n' "${2:-25ms}"
}

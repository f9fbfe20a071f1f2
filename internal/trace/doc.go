// Package trace watches what the GPU scheduler's users do, for any process
// on the machine, without touching them: eBPF programs on the ioctl syscall
// tracepoints see every NVIDIA RM allocation, free and control (TSGs and
// channels created, timeslices set, preemptions, with caller, status and
// duration), and uprobes on libcuda and on the hint API see kernel launches,
// synchronizations and hints.
//
// The BPF side only copies raw bytes; every layout is decoded here, with the
// structs of package ioctl, and the decoders are fuzzed. What is built on
// the events lives with its consumers: requests and hint timelines
// (package internal/trace/request), and the live channel-group registry
// (what a daemon needs to apply policy from the moment a process creates
// its TSGs, and to see libcuda's own SET_TIMESLICE; package
// internal/registry).
//
// The kernels this runs on have syscall tracepoints and uprobes but neither
// kprobes nor fentry/fexit (kernel lockdown), so nothing here uses those.
package trace

package trace

// The BPF programs are compiled with clang and committed with their Go
// bindings; `make ebpf-check` regenerates them and fails on any difference.
// The RM program reads only tracepoint records and is the same for every
// little-endian architecture; the uprobe program reads registers, whose
// layout is per architecture.

//go:generate go tool bpf2go -tags linux -target bpfel -type rm_event -type task_exit_event rm bpf/rmioctl.c -- -I./bpf -Wall -Werror
//go:generate go tool bpf2go -tags linux -target amd64,arm64 -type call_event -type role calls bpf/calls.c -- -I./bpf -Wall -Werror
//go:generate go tool bpf2go -tags linux -target bpfel launches bpf/launches.c -- -I./bpf -Wall -Werror

// Package ioctl is the NVIDIA resource manager (RM) ABI in Go: escape
// numbers, the NVOSxx parameter blocks, control commands with their
// parameters, class IDs and NV_STATUS codes, plus an FD type that issues them
// on a /dev/nvidiactl file — one opened by us or one duplicated from another
// process with pidfd_getfd.
//
// Definitions keep NVIDIA's C names so that they can be grepped against the
// open-gpu-kernel-modules headers; each block names the header it comes from.
// Every ABI struct starts with structs.HostLayout and holds only fixed-width
// fields with explicit padding; layout_test.go enforces both rules and pins
// each size to the C sizeof. Syscalls and unsafe live only in *_unsafe.go
// files (fd_unsafe.go); the other files use golang.org/x/sys/unix for its
// constants and types alone (errno values to classify a failure, stat mode
// bits), never to make a call. The RM calls themselves, pidfd_open and
// pidfd_getfd are made here and nowhere else: tsg asks ioctl (OpenPidfd,
// IsControlDevicePath). Other packages use x/sys/unix only for what is not
// the driver's: the daemon's peer credentials and lock file, the tracer's
// BPF plumbing, CLOCK_MONOTONIC readings in the benchmark.
//
// What differs between driver versions is here too: LookupABI keys the
// layouts on the version the driver reports, and ABI.ParamSize is the one
// table of control parameter sizes. DecodeParams is the one decoder of
// control parameter bytes that come from outside.
package ioctl

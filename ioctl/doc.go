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
// each size to the C sizeof. Syscalls and unsafe live only in *_unsafe.go.
package ioctl

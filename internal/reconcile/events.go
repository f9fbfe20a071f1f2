// Package reconcile holds gpreemptd's policy over every GPU process of the
// node. An event source (eBPF on RM ioctls, or a /proc scan when BPF is not
// available) says when channel groups appear, are set up, drift and go;
// the Reconciler classes each context shortly after its last setup call,
// re-applies what others change, and restores the driver's defaults on
// shutdown.
//
// What it consumes is declared here as small interfaces (Events,
// Controller, Inspector), so that the registry and discovery it runs on
// can be swapped in one adapter file (adapters.go).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// EventKind says what happened to a group or process.
type EventKind uint8

const (
	// GroupCreated: a channel group was allocated.
	GroupCreated EventKind = iota + 1
	// GroupSetup: the owner worked on the group (a channel, an engine
	// object, its own SET_TIMESLICE or GPFIFO_SCHEDULE after setup).
	// Classing waits for these to stop.
	GroupSetup
	// GroupSet: someone other than this daemon changed the group's
	// timeslice or interleave level (the owner included, once classed).
	GroupSet
	// GroupFreed: the group is gone.
	GroupFreed
	// ProcessExited: the process ended; RM freed everything it had.
	ProcessExited
)

func (k EventKind) String() string {
	switch k {
	case GroupCreated:
		return "created"
	case GroupSetup:
		return "setup"
	case GroupSet:
		return "set"
	case GroupFreed:
		return "freed"
	case ProcessExited:
		return "exited"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Event is one thing the source saw.
type Event struct {
	Kind EventKind
	// PID owns the group (or exited).
	PID   int
	Group tsg.GroupID
	// By is the caller's pid for GroupSet/GroupSetup.
	By int
	// At is when it happened (CLOCK_MONOTONIC).
	At time.Duration
	// Timeslice is the value a SET_TIMESLICE wrote (0: not a timeslice
	// change).
	Timeslice tsg.Micros
}

// Events is a source of events: eBPF, or nothing (scan mode).
type Events interface {
	// Mode names the source for logs and status ("bpf").
	Mode() string
	// Run delivers events to fn until ctx is done or the source fails.
	Run(ctx context.Context, fn func(Event)) error
	// Live reports the pids the source knows own groups now, with their
	// groups (the registry), for status and for the first reconcile.
	Live() map[int][]tsg.GroupID
}

// GroupState is one group as read back after a change.
type GroupState struct {
	ID         tsg.GroupID `json:"id"`
	Engine     tsg.Engine  `json:"engine"`
	Timeslice  tsg.Micros  `json:"timeslice_us"`
	Interleave tsg.Level   `json:"interleave"`
	GPU        string      `json:"gpu,omitempty"`
}

// Controller reaches a process's groups. Every call attaches, acts and
// closes: no duplicate of a target's file outlives the call.
type Controller interface {
	// Groups reads pid's groups.
	Groups(ctx context.Context, pid int) ([]GroupState, error)
	// Apply changes the groups s picks, all or nothing, and returns every
	// group of pid as read back afterwards.
	Apply(ctx context.Context, pid int, s func(GroupState) (tsg.Settings, bool)) ([]GroupState, error)
}

// ErrGone marks a target that exited (or freed its context) under us:
// worth one debug line, nothing more.
var ErrGone = errors.New("target gone")

// IsGone says whether err means the target or its context went away.
func IsGone(err error) bool {
	return errors.Is(err, ErrGone) ||
		errors.Is(err, ioctl.ErrNoSuchProcess) ||
		errors.Is(err, tsg.ErrNoGPUContext) ||
		errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT) ||
		errors.Is(err, ioctl.NV_ERR_INVALID_OBJECT_HANDLE) ||
		errors.Is(err, ioctl.NV_ERR_OBJECT_NOT_FOUND)
}

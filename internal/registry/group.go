package registry

import (
	"encoding/json"
	"slices"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// maxChanges bounds each group's change history: a policy daemon that sets
// a timeslice per request must not grow the registry without end.
const maxChanges = 32

// Group is a channel group as the registry knows it: tsg.Group holds its
// identity and settings (owner pid and fd, client, device, handle,
// hardware id, engine, channels, timeslice, interleave level); the rest is
// what only the registry knows. Its tsg.Group never reaches RM: the
// registry keeps no open file, and Do hands fresh groups to its function.
//
// For a group known from events alone, PID 0 means the owner is not known
// (the group was created before tracing began and its client was not
// seen), TSGID is 0 (RM reports it only to a GET_INFO) and FD is the
// descriptor the allocation was made on (-1: not known).
type Group struct {
	tsg.Group
	// Comm is the owner's name.
	Comm string
	// Created is the allocation's time (CLOCK_MONOTONIC ns); 0 when the
	// group was first met in a control or by discovery.
	Created     uint64
	Schedule    Schedule
	Preemptions int
	// Changes lists the last changes, oldest first.
	Changes []Change
}

// groupJSON is a group's wire form, kept as `gpreemptctl trace tsg -o
// json` has always printed it whatever tsg.Group's own JSON (ps's) grows.
type groupJSON struct {
	PID         int          `json:"pid"`
	Comm        string       `json:"comm"`
	FD          int          `json:"fd"`
	Client      ioctl.Handle `json:"client"`
	Device      ioctl.Handle `json:"device"`
	Handle      ioctl.Handle `json:"handle"`
	Created     uint64       `json:"created_ns"`
	Channels    int          `json:"channels"`
	Engine      tsg.Engine   `json:"engine"`
	TimesliceUs tsg.Micros   `json:"timeslice_us"`
	Interleave  tsg.Level    `json:"interleave"`
	Schedule    Schedule     `json:"schedule"`
	Preemptions int          `json:"preemptions"`
	Changes     []Change     `json:"changes,omitempty"`
}

func (g Group) MarshalJSON() ([]byte, error) {
	return json.Marshal(groupJSON{
		PID: g.PID, Comm: g.Comm, FD: g.FD, Client: g.Client, Device: g.Device, Handle: g.Handle,
		Created: g.Created, Channels: g.Channels, Engine: g.Engine, TimesliceUs: g.Timeslice,
		Interleave: g.Interleave, Schedule: g.Schedule, Preemptions: g.Preemptions, Changes: g.Changes,
	})
}

func (g *Group) clone() Group {
	c := *g
	c.Changes = slices.Clone(g.Changes)
	return c
}

func (g *Group) record(c Change) {
	if len(g.Changes) == maxChanges {
		g.Changes = slices.Delete(g.Changes, 0, 1)
	}
	g.Changes = append(g.Changes, c)
}

// Schedule is whether a group is on the runlist (GPFIFO_SCHEDULE).
type Schedule uint8

const (
	ScheduleUnknown Schedule = iota
	ScheduleEnabled
	ScheduleDisabled
)

func (s Schedule) String() string {
	switch s {
	case ScheduleEnabled:
		return "enabled"
	case ScheduleDisabled:
		return "disabled"
	}
	return "?"
}

// MarshalText makes the state read as a word in JSON.
func (s Schedule) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Caller is who made an RM call: the process and thread, which need not
// own the object (gpreemptctl and gpreemptd control another process's
// groups through a duplicate of its file).
type Caller struct {
	PID  uint32 `json:"pid"`
	TID  uint32 `json:"tid"`
	Comm string `json:"comm"`
}

// Change is one successful control that changed a group's scheduling.
type Change struct {
	At     uint64 `json:"at_ns"`
	By     Caller `json:"by"`
	Cmd    uint32 `json:"cmd"`
	Name   string `json:"name"`
	Value  string `json:"value"`
	TookNs uint64 `json:"took_ns"`
}

// UpdateKind says what happened to the registry.
type UpdateKind string

const (
	// UpdateTSGAlloc: a group was allocated (a refused allocation is
	// reported too, with only Before's handles set).
	UpdateTSGAlloc     UpdateKind = "tsg-alloc"
	UpdateChannelAlloc UpdateKind = "channel-alloc"
	// UpdateEngine: the group's engine became known (a context share or a
	// compute object means compute; copy objects alone, copy).
	UpdateEngine UpdateKind = "engine"
	// UpdateControl: a channel-group control (SET/GET_TIMESLICE, SET/GET
	// _INTERLEAVE_LEVEL, GPFIFO_SCHEDULE, PREEMPT, ...), whoever made it
	// and whatever RM answered. Origin says who; Change is set when it
	// changed the group's scheduling.
	UpdateControl     UpdateKind = "control"
	UpdateChannelFree UpdateKind = "channel-free"
	// UpdateTSGFree: the group was freed (by itself, with its device or
	// its client). Call is nil when the free was not seen: discovery no
	// longer finds the group, or its handle was allocated again.
	UpdateTSGFree UpdateKind = "tsg-free"
	// UpdateTSGExit: the owner exited; RM freed the group with its file.
	UpdateTSGExit UpdateKind = "tsg-exit"
	// UpdateTSGFound: discovery found a group the events had not shown
	// (made before tracing began, or tracing is off).
	UpdateTSGFound UpdateKind = "tsg-found"
	// UpdateProcessExit: the process is gone (its exit was traced, or an
	// identity check found its pid empty or held by another process),
	// after the UpdateTSGExit of each of its groups. Only Process is set.
	UpdateProcessExit UpdateKind = "process-exit"
)

// Origin says who made a control, relative to the group it acts on.
type Origin uint8

const (
	// OriginNone: not a control.
	OriginNone Origin = iota
	// OriginOwner: the group's own process. libcuda's SET_TIMESLICE(2048)
	// on the compute group right after channel setup is one; a policy
	// applied before it is overwritten by it.
	OriginOwner
	// OriginSelf: the registry's user (Options.Self), acting through Do.
	OriginSelf
	// OriginOther: anyone else; a setting changed this way has drifted
	// from what the registry's user applied.
	OriginOther
)

func (o Origin) String() string {
	switch o {
	case OriginOwner:
		return "owner"
	case OriginSelf:
		return "self"
	case OriginOther:
		return "other"
	}
	return "none"
}

// MarshalText makes the origin read as a word in JSON.
func (o Origin) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Update is one change to the registry: the event that made it, the group
// before and after, and for channel and engine objects the object itself.
type Update struct {
	Kind UpdateKind
	// Process is the owner's identity; zero when the owner is not known.
	Process ProcessID
	// Call is the RM call; nil for updates no RM call made (exits,
	// discovery).
	Call          *trace.RMCall
	Before, After Group
	Object        ioctl.Handle
	Class         uint32
	// Origin and Change are set for UpdateControl.
	Origin Origin
	Change *Change
}

// ChangesSettings reports whether the update is a successful SET of a
// group's timeslice or interleave level, the settings a policy holds: from
// OriginOwner right after the group's channels were set up it is
// libcuda's own SET_TIMESLICE, after which a policy must be (re)applied;
// from OriginOther it is drift.
func (u Update) ChangesSettings() bool {
	if u.Kind != UpdateControl || u.Change == nil {
		return false
	}
	return u.Change.Cmd == ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE || u.Change.Cmd == ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL
}

// Group returns the group the update is about: After, or Before when the
// update removed it.
func (u Update) Group() Group {
	if u.After.Handle != 0 {
		return u.After
	}
	return u.Before
}

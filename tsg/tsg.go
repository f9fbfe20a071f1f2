// Package tsg finds the channel groups (TSGs) of CUDA processes and changes
// how the GPU schedules them: timeslice, interleave level, preemption, and
// suspension from the runlist.
//
// Discovery sits behind Source. The source that works on a stock driver for
// an already-running process (AttachSource) duplicates the process's
// /dev/nvidiactl file with pidfd_getfd, finds the RM clients bound to that
// file, and walks each client's objects with RM's own client queries.
package tsg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Engine is the kind of work a channel group carries.
type Engine string

const (
	// EngineCompute: the group's channels carry a compute class (libcuda's
	// first TSG, with the context share and 8 channels on Hopper).
	EngineCompute Engine = "compute"
	// EngineCopy: the channels carry copy-engine classes only.
	EngineCopy Engine = "copy"
	// EngineUnknown: no engine object found under the group's channels yet.
	EngineUnknown Engine = "unknown"
)

// Level is a runlist interleave level (NVA06C_CTRL_INTERLEAVE_LEVEL_*): a
// HIGH group appears in the runlist more often than MEDIUM and LOW ones.
type Level uint32

const (
	LevelLow    Level = ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_LOW
	LevelMedium Level = ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM
	LevelHigh   Level = ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH
	// LevelUnknown marks a level that could not be read: GSP-RM on the
	// H100 answers GET_INTERLEAVE_LEVEL with NV_ERR_NOT_SUPPORTED while it
	// accepts SET_INTERLEAVE_LEVEL.
	LevelUnknown Level = 0xffffffff
)

func (l Level) String() string {
	switch l {
	case LevelLow:
		return "low"
	case LevelMedium:
		return "medium"
	case LevelHigh:
		return "high"
	case LevelUnknown:
		return "n/a"
	}
	return fmt.Sprintf("level(%d)", uint32(l))
}

// MarshalText makes levels read as words in JSON.
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads what MarshalText writes, so that a group printed as
// JSON reads back the same.
func (l *Level) UnmarshalText(b []byte) error {
	if string(b) == LevelUnknown.String() {
		*l = LevelUnknown
		return nil
	}
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseLevel accepts low, medium, high (any case) or 0, 1, 2.
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "low", "0":
		return LevelLow, nil
	case "medium", "1":
		return LevelMedium, nil
	case "high", "2":
		return LevelHigh, nil
	}
	return 0, fmt.Errorf("%w: interleave level %q: want low, medium or high", ErrInvalidArgument, s)
}

// Timeslice bounds accepted by SetTimeslice. RM takes the value in whole
// microseconds and rounds it down to what the hardware can do; 1 us .. 5 s
// were measured to be accepted and read back on an H100 (580.159.04).
const (
	MinTimeslice = time.Microsecond
	MaxTimeslice = 5 * time.Second
)

// CheckTimeslice returns an error naming the value when d is outside
// [MinTimeslice, MaxTimeslice] or not a whole number of microseconds.
func CheckTimeslice(d time.Duration) error {
	if d < MinTimeslice || d > MaxTimeslice {
		return fmt.Errorf("%w: timeslice %v out of range [%v, %v]", ErrInvalidArgument, d, MinTimeslice, MaxTimeslice)
	}
	if d%time.Microsecond != 0 {
		return fmt.Errorf("%w: timeslice %v is not a whole number of microseconds", ErrInvalidArgument, d)
	}
	return nil
}

// ParseTimeslice parses a duration as users write it ("200us", "2ms",
// "1.5ms", "5s"; "µs" too) and checks its range. A bare number is refused:
// the unit is never guessed.
func ParseTimeslice(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if _, numErr := strconv.ParseFloat(strings.TrimSpace(s), 64); numErr == nil {
			return 0, fmt.Errorf("%w: timeslice %q has no unit (write e.g. 200us or 2ms)", ErrInvalidArgument, s)
		}
		return 0, fmt.Errorf("%w: timeslice %q: %v", ErrInvalidArgument, s, err)
	}
	if err := CheckTimeslice(d); err != nil {
		return 0, err
	}
	return d, nil
}

// Group is one channel group of one process.
type Group struct {
	PID int `json:"pid"`
	// FD is the target process's descriptor of the /dev/nvidiactl file
	// that owns Client.
	FD     int          `json:"fd"`
	Client ioctl.Handle `json:"client"`
	Device ioctl.Handle `json:"device"`
	Handle ioctl.Handle `json:"handle"`
	// TSGID is the hardware TSG id (NVA06C_CTRL_CMD_GET_INFO).
	TSGID      uint32 `json:"tsg_id"`
	Engine     Engine `json:"engine"`
	Channels   int    `json:"channels"`
	Timeslice  Micros `json:"timeslice_us"`
	Interleave Level  `json:"interleave"`
	// InterleaveSetOnly: the driver does not report the level (GSP-RM
	// refuses GET_INTERLEAVE_LEVEL), and Interleave is what this Process
	// last set, not a read-back.
	InterleaveSetOnly bool `json:"interleave_set_only,omitempty"`
	// GPUID is RM's id of the GPU the group runs on (the gpuId of
	// NV0000_CTRL_CMD_GPU_GET_ID_INFO; nvidia-smi -q shows the same GPU by
	// its PCI address), 0 where the source cannot tell: the escape
	// source reports it, the attach source does not (see AttachSource).
	GPUID uint32 `json:"gpu_id,omitempty"`

	// ctl reads and changes the group's scheduling.
	ctl Control
}

// Micros is a duration in whole microseconds, RM's unit for timeslices.
type Micros uint64

func (m Micros) Duration() time.Duration { return time.Duration(m) * time.Microsecond }

func (m Micros) String() string { return formatMicros(uint64(m)) }

func formatMicros(us uint64) string {
	switch {
	case us >= 1000000 && us%1000000 == 0:
		return fmt.Sprintf("%ds", us/1000000)
	case us >= 1000 && us%1000 == 0:
		return fmt.Sprintf("%dms", us/1000)
	}
	return fmt.Sprintf("%dus", us)
}

// GroupID names one channel group on the machine: the RM handles of its
// client and of the group itself. RM's client handles are unique on the
// machine and a group's handle is unique within its client, so the pair
// holds from the group's allocation to its free, whoever finds it (the
// tracer, a discovery, a control call).
type GroupID struct {
	Client ioctl.Handle `json:"client"`
	Handle ioctl.Handle `json:"handle"`
}

func (id GroupID) String() string { return fmt.Sprintf("%v/%v", id.Client, id.Handle) }

// Compare orders ids by client, then handle.
func (id GroupID) Compare(o GroupID) int {
	if c := cmp.Compare(id.Client, o.Client); c != 0 {
		return c
	}
	return cmp.Compare(id.Handle, o.Handle)
}

// ID is the group's identity on the machine.
func (g Group) ID() GroupID { return GroupID{Client: g.Client, Handle: g.Handle} }

// Key identifies a group across discoveries.
func (g Group) Key() string {
	return fmt.Sprintf("%d/%d/%v/%v", g.PID, g.FD, g.Client, g.Handle)
}

// Errors a caller can act on. RM's refusals come through as ioctl.NvStatus
// values (errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT)), and the ioctl
// package's sentinels (ErrNoDriver, ErrNoSuchProcess, ErrPermission,
// ErrUnsupportedDriver) pass through unchanged.
var (
	// ErrNoGPUContext: the process exists but holds no RM client with a
	// channel group (not a CUDA process, or no context created yet).
	ErrNoGPUContext = errors.New("no GPU context")
	// ErrInvalidArgument: a value the caller gave is out of range or malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNoSuchGroup: a selection matched no group of the process.
	ErrNoSuchGroup = errors.New("no such channel group")
)

// Source discovers the channel groups of a process, or of every process.
type Source interface {
	Name() string
	// Discover finds the groups of pid: ErrNoGPUContext if it has none,
	// ioctl.ErrNoSuchProcess if it does not exist.
	Discover(ctx context.Context, pid int) (*Process, error)
	// DiscoverAll finds the groups of every process the caller may see.
	// A process that exits meanwhile is left out; one the caller may not
	// examine is counted in Listing.Denied.
	DiscoverAll(ctx context.Context) (*Listing, error)
}

// Listing is what DiscoverAll found.
type Listing struct {
	// Processes holds every process with a channel group, in pid order.
	Processes []*Process
	// Examined counts the processes whose groups were read, with or
	// without a channel group (nvidia-smi holds the control node and has
	// none).
	Examined int
	// Denied counts the processes left out because the caller lacks the
	// rights to examine them (reading /proc/PID/fd, or pidfd_getfd); they
	// may hold channel groups. The escape source cannot tell: the driver
	// leaves out what the caller may not see, and Denied stays 0.
	Denied int
	// Failed holds, for the processes that could be examined neither way,
	// the error that stopped each (each names its pid).
	Failed []error
}

// Close releases what the processes hold (see Process.Close).
func (l *Listing) Close() error {
	var errs []error
	for _, p := range l.Processes {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

package tsg_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// known returns pid's groups as a tracer-fed registry knows them: identity
// and engine, nothing read from RM.
func known(t *testing.T, d *rmfake.Driver, pid int) (int, []tsg.Group) {
	fd, gs, _ := knownAndFound(t, d, pid)
	return fd, gs
}

// knownAndFound is known, with what Discover found.
func knownAndFound(t *testing.T, d *rmfake.Driver, pid int) (int, []tsg.Group, []tsg.Group) {
	t.Helper()
	p, err := tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}).Discover(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var gs []tsg.Group
	for _, g := range p.Groups {
		gs = append(gs, tsg.Group{PID: pid, FD: g.FD, Client: g.Client, Device: g.Device, Handle: g.Handle,
			Engine: g.Engine, Channels: g.Channels, Interleave: tsg.LevelUnknown})
	}
	return p.Groups[0].FD, gs, p.Groups
}

// TestOpenKnownGroups: Open builds the same controllable groups as
// Discover with one client probe, and keeps no duplicate past Close.
func TestOpenKnownGroups(t *testing.T) {
	d := newTraced(t, 100)
	fd, gs, want := knownAndFound(t, d, 100)
	src := tsg.NewAttachSource(d.Host(), tsg.ScanOptions{})
	probes := d.Controls(ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO)
	p, err := src.Open(context.Background(), 100, fd, gs)
	if err != nil {
		t.Fatal(err)
	}
	if n := d.Controls(ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO) - probes; n != 1 {
		t.Errorf("Open made %d GET_HANDLE_INFO probes, want 1", n)
	}
	if len(p.Groups) != len(want) {
		t.Fatalf("opened %d groups, want %d", len(p.Groups), len(want))
	}
	for i, g := range p.Groups {
		w := want[i]
		if g.Key() != w.Key() || g.TSGID != w.TSGID || g.Timeslice != w.Timeslice || g.Engine != w.Engine {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	if err := p.SetTimeslice(context.Background(), p.Groups[:1], 300_000); err != nil {
		t.Fatal(err)
	}
	if ts, err := p.GetTimeslice(p.Groups[0]); err != nil || ts != 300_000 {
		t.Errorf("timeslice after set: %v, %v", ts, err)
	}
	p.Close()
	// Nothing of ours holds the file: when the process exits, RM frees
	// its clients.
	d.Exit(100)
	if cs := d.Clients(); len(cs) != 0 {
		t.Errorf("clients %v outlive the process: a duplicate was kept", cs)
	}
}

func TestOpenRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group)
		is    error
	}{
		{"no such fd", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) { return 77, gs }, nil},
		{"wrong control file", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) {
			d.OpenControlAt(d.Proc(100), 78)
			return 78, gs
		}, tsg.ErrNoGPUContext},
		{"client not bound", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) {
			gs = slices.Clone(gs)
			gs[1].Client++
			return fd, gs
		}, tsg.ErrNoGPUContext},
		{"group gone", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) {
			gs = slices.Clone(gs)
			gs[2].Handle = 0x5c0fffff
			return fd, gs
		}, ioctl.NV_ERR_INVALID_OBJECT_HANDLE},
		{"process exited", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) {
			d.Exit(100)
			return fd, gs
		}, ioctl.ErrNoSuchProcess},
		{"pid reused", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) {
			d.Exit(100)
			if _, _, err := d.ReplayFile(100, tracePath); err != nil {
				panic(err)
			}
			return fd, gs
		}, tsg.ErrNoGPUContext},
		{"no groups", func(d *rmfake.Driver, fd int, gs []tsg.Group) (int, []tsg.Group) { return fd, nil }, tsg.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTraced(t, 100)
			fd, gs := known(t, d, 100)
			fd, gs = tt.setup(d, fd, gs)
			p, err := tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}).Open(context.Background(), 100, fd, gs)
			if err == nil {
				p.Close()
				t.Fatal("Open succeeded")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want %v", err, tt.is)
			}
			// No duplicate left behind.
			d.Exit(100)
			if cs := d.Clients(); len(cs) != 0 {
				t.Errorf("clients %v outlive the process: a duplicate was kept", cs)
			}
		})
	}
}

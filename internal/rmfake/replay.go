package rmfake

import (
	"fmt"
	"os"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Replay recreates a traced process in p: the control file (the fd its
// clients were allocated on), the /dev/nvidiaN files registered with it
// (the fds RM events were allocated on), and every allocation, with client
// handles mapped to the ones this fake hands out. It then does what libcuda
// does after channel setup (LibcudaPostSetup). It returns the clients in
// trace order.
func (d *Driver) Replay(p *Proc, trace []TraceAlloc) ([]ioctl.Handle, error) {
	clientMap := map[ioctl.Handle]ioctl.Handle{}
	var clients []ioctl.Handle
	var ctlFD = -1
	fds := map[int]*FD{}
	for i, a := range trace {
		fd := fds[a.FD]
		if fd == nil {
			if ctlFD < 0 {
				ctlFD = a.FD
				fd = d.OpenControlAt(p, a.FD)
			} else {
				var err error
				if fd, err = d.OpenDeviceAt(p, a.FD, ctlFD); err != nil {
					return nil, err
				}
			}
			fds[a.FD] = fd
		}
		if a.Class == ioctl.NV01_ROOT_CLIENT && a.Client == 0 {
			h, err := fd.Alloc(0, 0, 0, a.Class, nil)
			if err != nil {
				return nil, fmt.Errorf("trace entry %d: %w", i+1, err)
			}
			clientMap[a.Handle] = h
			clients = append(clients, h)
			continue
		}
		c, ok := clientMap[a.Client]
		if !ok {
			return nil, fmt.Errorf("trace entry %d: client %v was never allocated", i+1, a.Client)
		}
		parent := a.Parent
		if mapped, ok := clientMap[parent]; ok {
			parent = mapped
		}
		if _, err := fd.Alloc(c, parent, a.Handle, a.Class, nil); err != nil {
			return nil, fmt.Errorf("trace entry %d (h=%v class=%#x): %w", i+1, a.Handle, a.Class, err)
		}
	}
	for _, c := range clients {
		if err := d.LibcudaPostSetup(p, ctlFD, c); err != nil {
			return nil, err
		}
	}
	return clients, nil
}

// LibcudaPostSetup does what libcuda (CUDA 13.0) does once a context's
// channels exist, as measured on the H100: GPFIFO_SCHEDULE(enable) on every
// TSG, and SET_TIMESLICE(2048) on the compute TSG (the one holding a
// FERMI_CONTEXT_SHARE_A).
func (d *Driver) LibcudaPostSetup(p *Proc, ctlFD int, hClient ioctl.Handle) error {
	fd := &FD{d: d, f: p.fds[ctlFD]}
	d.mu.Lock()
	c := d.clients[hClient]
	var tsgs []ioctl.Handle
	compute := map[ioctl.Handle]bool{}
	if c != nil {
		for h, o := range c.objects {
			if ioctl.IsChannelGroupClass(o.class) {
				tsgs = append(tsgs, h)
			}
			if o.class == ioctl.FERMI_CONTEXT_SHARE_A {
				compute[o.parent] = true
			}
		}
	}
	d.mu.Unlock()
	abi, err := ioctl.LookupABI(d.version, true)
	if abi.Name == "" {
		return err
	}
	for _, t := range tsgs {
		if err := fd.ControlBytes(hClient, t, ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, abi.ScheduleParams(true)); err != nil {
			return err
		}
		if compute[t] {
			ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 2048}
			if err := ioctl.Control(fd, hClient, t, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, &ts); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReplayFile parses and replays a trace file into a new process pid.
func (d *Driver) ReplayFile(pid int, path string) (*Proc, []ioctl.Handle, error) {
	trace, err := ParseTraceFile(path)
	if err != nil {
		return nil, nil, err
	}
	p := d.NewProc(pid)
	clients, err := d.Replay(p, trace)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, clients, nil
}

// ParseTraceFile parses the trace file at path (ParseTrace); errors name
// the file.
func ParseTraceFile(path string) ([]TraceAlloc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	trace, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return trace, nil
}

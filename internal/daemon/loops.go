package daemon

import (
	"context"
	"os"
	"time"

	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/tsg"
)

// sloLoop runs the SLO mode once a window (the policy's, re-read each
// time so a reload takes effect), a window after the last step began, not
// after it ended: apps' reporters push just ahead of the read it told them
// of (slomode.Loop.Reply).
func (d *Daemon) sloLoop(ctx context.Context) {
	wait := d.slo.Window()
	for {
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			start := d.rec.Now()
			d.slo.Step(start)
			wait = start + d.slo.Window() - d.rec.Now()
		}
	}
}

func (d *Daemon) tickLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := d.rec.Now()
		next := d.rec.Tick(ctx, now)
		wait := time.Hour
		if next != 0 {
			wait = max(next-d.rec.Now(), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-d.rec.Wake():
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// scan lists the processes with a GPU control file open, adopts their
// groups and checks drift; processes gone from /proc are forgotten.
func (d *Daemon) scan(ctx context.Context) {
	pids, denied, err := d.lister.Processes()
	if err != nil {
		d.log.Warn("scan", "err", err)
		return
	}
	if denied > 0 {
		d.log.Warn("scan: processes left out, no rights to examine them", "denied", denied)
	}
	live := map[int]bool{}
	for _, pid := range pids {
		live[pid] = true
		if pid == os.Getpid() {
			continue
		}
		states, err := d.ctl.Groups(ctx, pid)
		if err != nil {
			if !reconcile.IsGone(err) {
				d.log.Debug("scan: cannot read groups", "pid", pid, "err", err)
			}
			continue
		}
		ids := make([]tsg.GroupID, 0, len(states))
		for _, s := range states {
			ids = append(ids, s.ID)
		}
		if len(ids) > 0 {
			d.rec.Adopt(pid, ids)
			d.rec.CheckDrift(states, pid)
		}
	}
	for _, pid := range d.rec.Known() {
		if !live[pid] {
			if !d.inspect.Alive(pid) {
				d.rec.Forget(pid)
			}
		}
	}
}

func (d *Daemon) scanLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.scan(ctx)
		}
	}
}

// resyncOnLoss scans /proc as soon as the ring buffer has dropped events:
// a context whose events were lost is classed within a second, not at the
// next periodic resync.
func (d *Daemon) resyncOnLoss(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	seen := d.lost()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := d.lost(); n > seen {
				d.log.Warn("trace events lost; resyncing from /proc", "lost", n-seen)
				seen = n
				d.scan(ctx)
			}
		}
	}
}

// housekeeping reloads on SIGHUP and on a change of the policy file, and
// drops pushed statistics of processes that exited.
func (d *Daemon) housekeeping(ctx context.Context) {
	hup := d.hup
	poll := d.cfg.PolicyPoll
	if poll < 0 {
		poll = time.Hour
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	sweep := time.NewTicker(min(poll, pusherSweep))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			d.log.Info("SIGHUP: reloading")
			d.Reload()
		case <-t.C:
			if d.cfg.PolicyPoll > 0 && d.policyChanged() {
				d.log.Info("policy file changed: reloading", "file", d.cfg.PolicyFile)
				d.Reload()
			}
		case <-sweep.C:
			d.sweepPushers()
		}
	}
}

// sweepPushers forgets what exited processes pushed. An exit forgets a
// process's metrics at once, but not what it pushed to the SLO loop.
func (d *Daemon) sweepPushers() {
	for _, pid := range append(d.metrics.Pushers(), d.slo.Pushers()...) {
		if !d.inspect.Alive(pid) {
			d.metrics.forget(pid)
			d.slo.Forget(pid)
		}
	}
}

// pusherSweep is how often the pushed state of exited processes is
// swept: at most this long, a process that reuses a pid may be taken for
// one running a hint engine.
const pusherSweep = 5 * time.Second

package slomode

import (
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

func (l *Loop) pausing() bool {
	return slices.ContainsFunc(l.sorted(), func(s *search) bool { return s.pausing })
}

// pauseFor keeps stopped (max at most) the BE of live searches learning an LC alone, resumes the rest; one whose BE won't stop calibrates beside.
func (l *Loop) pauseFor(max time.Duration) {
	wants := func(s *search) bool { return l.Pause != nil && s.decided != nil && s.decided.PauseBE && s.live() }
	why, keep := "", []policy.ProcRef(nil)
	for _, s := range l.sorted() {
		if wants(s) {
			keep = append(keep, s.bes...)
		} else if s.pausing && s.decided != nil && why == "" {
			why = s.decided.Reason
		}
	}
	if len(keep) == 0 {
		l.resume(why)
		return
	}
	if n, err := l.Pause.ResumeExcept(keep); err != nil {
		l.log.Error("slo: resuming BE processes", "err", err)
	} else if n > 0 {
		l.log.Info("slo: BE processes resumed", "processes", n, "reason", why)
	}
	for _, s := range l.sorted() {
		if s.pausing = wants(s); !s.pausing {
			continue
		}
		n, err := l.Pause.Stop(s.bes, max)
		switch {
		case err != nil:
			l.log.Error("slo: could not stop BE processes to learn an LC alone; calibrating beside them", "gpus", s.key, "err", err)
			s.pausing = false
			keep = slices.DeleteFunc(keep, func(b policy.ProcRef) bool { return l.beSearch[b.Key()] == s })
			if _, err := l.Pause.ResumeExcept(keep); err != nil {
				l.log.Error("slo: resuming BE processes", "err", err)
			}
		case n > 0:
			l.log.Info("slo: BE processes stopped to learn an LC alone", "gpus", s.key, "processes", n)
		}
	}
}

func (l *Loop) resume(why string) {
	was := l.pausing()
	for _, s := range l.searches {
		s.pausing = false
	}
	if l.Pause == nil || !was && !l.Pause.Holding() {
		return
	}
	l.mu.Lock()
	l.status.BEStopped = nil
	l.mu.Unlock()
	l.metrics.SetBEStopped(0)
	if err := l.Pause.Resume(); err != nil {
		l.log.Error("slo: resuming BE processes", "err", err)
		return
	}
	l.log.Info("slo: BE processes resumed", "reason", why)
}

// Close resumes what SLO mode stopped as the daemon exits (a dying one leaves it to the Pauser's watchdog).
func (l *Loop) Close() { l.resume("gpreemptd stopping") }

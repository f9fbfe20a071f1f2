package request

import (
	"slices"
	"time"
)

// sizeWindow is how many of a process's last requests, each told apart by
// quiet gaps, show how many launches one request is.
const sizeWindow = 8

// minProgram is the fewest launches a request of a program whose busy
// periods are divided may have: of one (a CUDA graph a request) every size
// is a multiple, and none tells a backlog from a larger request.
const minProgram = 2

// sizes keeps the launches of a process's last requests that quiet gaps
// told apart. Requests that arrive while the process is still serving the
// last run back to back with no quiet gap between them: one busy period.
// Where the process serves one program (every request told apart is of one
// size, give or take its scatter), such a busy period is as many requests
// as its launches are multiples of one, and each is counted at the busy
// period's mean.
type sizes struct {
	last [sizeWindow]int
	n    int // filled
	next int
	told int // added in all
	// start: how many of the first full window's busy periods, half of them
	// at most, lead took for the process's start where the trace began with
	// it (its setup's pieces, its warm-up, work no later request repeats, and
	// the backlogs behind it), no evidence of its requests while it stays in
	// the window.
	start int
	// varies: judge found the window's requests differ in size (or
	// launches were lost), and a busy period of k times the median may be
	// one request; none is divided while the busy period that showed it is
	// in the window, or from the first that was longer than the program
	// and off every multiple in a window with none under the program's
	// range (longer: the process serves requests of more than one size,
	// whole multiples among them perhaps; where some are under it, its
	// lower middle size may be a backlog, no program). varied: some
	// window did, or a cut left a rest under the program (Delimiter.close);
	// a running busy period is not cut at the program's worth from then on
	// (a longer request would be cut short, on less evidence than a whole
	// multiple's).
	varies, varied, longer bool
	// m, lo and hi are program()'s, worked out as the window changes.
	m, lo, hi int
	// firsts are the calls the window's requests began with; first the
	// one those past its start all began with, firstVaries: they began with
	// different ones (worked out as the window changes).
	firsts      [sizeWindow]string
	first       string
	firstVaries bool
	// quiet is the gap that ended each of the window's requests (the gap
	// in force as it closed, raised to the gap's length once the next call
	// came): a quiet gap longer than it would not have told it apart.
	quiet [sizeWindow]time.Duration
}

// add records a busy period that count did not divide: one request, or the
// evidence that requests differ in size (k requests it divides are neither;
// a run too long to divide, a multiple, is kept: no evidence that sizes
// differ, and what a window of a new size is made of).
func (s *sizes) add(launches int, first string, quiet time.Duration) {
	s.last[s.next], s.firsts[s.next], s.quiet[s.next] = launches, first, quiet
	s.next = (s.next + 1) % sizeWindow
	s.n = min(s.n+1, sizeWindow)
	if s.told++; s.n == sizeWindow {
		w := s.window()
		if s.told == sizeWindow {
			s.start = lead(w)
		}
		var odd bool
		from := s.start - (s.told - sizeWindow)
		s.m, s.lo, s.hi, odd = judge(w, from)
		past := min(max(from, 0), sizeWindow-1) // the first past the start
		s.longer = s.longer || s.m > 0 && longerOff(w[past:], s.lo, s.hi)
		s.varies, s.varied = odd || s.longer, s.varied || odd
		firsts := ring(&s.firsts, s.n, s.next)[past:]
		s.first, s.firstVaries = firsts[0], slices.ContainsFunc(firsts, func(f string) bool { return f != firsts[0] })
	}
}

// ended records the length of the gap after the last request told apart.
func (s *sizes) ended(g time.Duration) {
	if s.n > 0 {
		i := (s.next + sizeWindow - 1) % sizeWindow
		s.quiet[i] = max(s.quiet[i], g)
	}
}

// apartUnder reports whether a quiet gap of gap would have told every one
// of the window's requests apart: their launches are the program's under
// it (a busy decode's tokens, told apart under a gap learnt from its
// sampling misread as asleep, are not its requests under a longer one; a
// shorter gap only makes busy periods shorter).
func (s *sizes) apartUnder(gap time.Duration) bool {
	for i := range s.n {
		if gap > s.quiet[i] {
			return false
		}
	}
	return true
}

// window is the launches of the window's requests in the order told apart.
func (s *sizes) window() []int { return ring(&s.last, s.n, s.next) }

// ring is a's n values filled in order, the next to be written at next.
func ring[T any](a *[sizeWindow]T, n, next int) []T {
	if n < sizeWindow {
		return slices.Clone(a[:n])
	}
	return slices.Concat(a[next:], a[:next])
}

// judge works the program out from a full window w, in the order its
// busy periods were told apart, less its first start (the process's start
// still in it): the lower median m of the rest (a backlog or a warm-up only
// adds launches: it holds against up to half the window of them), and the
// range [lo, hi] of their requests of about one m. A busy period within k
// requests' range [k*lo, k*hi] is a backlog wherever it comes, as count treats
// one once the program is known: an LC behind its arrivals runs them so at
// any time, not only as it starts.
// odd: a busy period off every multiple, or requests half a request apart:
// the process's requests differ in size.
func judge(w []int, start int) (m, lo, hi int, odd bool) {
	w = w[min(max(start, 0), len(w)-1):]
	v := slices.Sorted(slices.Values(w))
	if m = v[(len(v)-1)/2]; m <= 0 {
		return 0, 0, 0, false
	}
	lo, hi = about(v, m)
	for _, l := range w {
		odd = odd || !aboutOne(l, m) && multiple(l, lo, hi) == 0
	}
	return m, lo, hi, odd || 2*(hi-lo) >= m
}

// longerOff reports whether w, none of it under the range [lo, hi] of the
// program's requests (else its lower middle size may be a backlog), holds
// a busy period over the range and off every multiple: a longer request.
func longerOff(w []int, lo, hi int) bool {
	return slices.Min(w) >= lo && slices.ContainsFunc(w, func(l int) bool { return l > hi && multiple(l, lo, hi) == 0 })
}

// aboutOne reports whether a busy period of l launches is about one m:
// within half a request of it.
func aboutOne(l, m int) bool { return (l+m/2)/m == 1 }

// about is the range of w's busy periods of about one m (half a request
// either side), m's own among them.
func about(w []int, m int) (lo, hi int) {
	lo, hi = m, m
	for _, l := range w {
		if aboutOne(l, m) {
			lo, hi = min(lo, l), max(hi, l)
		}
	}
	return lo, hi
}

// lead is how many of w's first busy periods, half of them at most (what
// the window's lower middle size, the program, holds against: setup's
// pieces, a warm-up and the backlogs behind it), are the process's start:
// up to the last of them over the range of the requests of about one
// program from it on (a warm-up or a backlog only add launches; a request
// at the top of the scatter is in that range), and whatever came before it
// (setup's pieces under half a request, a warm-up that ran fewer, or as
// many as a request, or a trace begun inside it: the process fell behind
// its arrivals as it started), one of them at most of about one program:
// two are requests the process served, and what came after them is no
// start. A first busy period under the range with a request of the range
// behind it and no start after is a request of another size, evidence that
// the process's requests differ.
func lead(w []int) int {
	m, _, _, _ := judge(w, 0)
	if m <= 0 {
		return 0
	}
	for i := min(len(w)/2, len(w)-1) - 1; i >= 0; i-- {
		served := 0 // busy periods before it of about one program: requests the process served
		for _, l := range w[:i] {
			if aboutOne(l, m) {
				served++
			}
		}
		if _, hi := about(w[i:], m); w[i] > hi && served <= 1 {
			return i + 1
		}
	}
	return 0
}

// program is the window's lower middle request, less its start, and the
// range of its requests of about one of it; ok once the window is full.
func (s *sizes) program() (m, lo, hi int, ok bool) {
	return s.m, s.lo, s.hi, s.n == sizeWindow && s.m > 0
}

// count is how many requests a busy period of launches holds: k >= 2
// where launches lie between k times the smallest and k times the largest
// of the last requests of about one median, and k ranges leave k
// unambiguous (under half a request); else 1, as for a process whose
// requests differ in size (a decode of varying lengths) or a program of
// under minProgram launches, whose busy periods are never divided, and
// where a quiet gap of gap (0: any) would not have told the window's
// requests apart: they are no requests under it (a busy decode's tokens,
// told apart under a gap learnt from its sampling misread as asleep, and
// its whole requests are then not divided into them, but recorded, until
// the window is made of them).
func (s *sizes) count(launches int, gap time.Duration) int {
	m, lo, hi, ok := s.program()
	if !ok || s.varies || m < minProgram || !s.apartUnder(gap) {
		return 1
	}
	if k := multiple(launches, lo, hi); k > 0 && 2*k*(hi-lo) < m {
		return k
	}
	return 1
}

// multiple is k >= 2 where launches lie in [k*lo, k*hi], k the fewest
// requests of the program that reach them (a busy period of k requests),
// else 0.
func multiple(launches, lo, hi int) int {
	if k := (launches + hi - 1) / hi; k >= 2 && k*lo <= launches {
		return k
	}
	return 0
}

// Count is how many of the process's requests r is: 1, or the requests a
// busy period held that ran back to back (Requests).
func (r Request) Count() int { return max(r.Requests, 1) }

// Each is the latency of each request r holds: its latency over Count.
func (r Request) Each() time.Duration { return r.Latency() / time.Duration(r.Count()) }

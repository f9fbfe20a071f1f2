package request

import (
	"slices"
	"time"
)

// sizeWindow is how many of a process's last requests, each told apart by
// quiet gaps, show how many launches one request is.
const sizeWindow = 8

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
	// start: how many of the first busy periods told apart came before the
	// first full window's first request of about its median: the process's
	// start where the trace began with it (its warm-up, work no later
	// request repeats, and any backlog behind it), no evidence of its
	// requests.
	start int
	// varies: judge found the requests differ in size (or launches were
	// lost), and a busy period of k times the median may be one request;
	// none is divided from then on.
	varies bool
	// m and spread are program()'s, worked out as the window changes.
	m, spread int
}

// add records a busy period that was not divided: one request, or the
// evidence that requests differ in size; a multiple too long to divide is
// neither.
func (s *sizes) add(launches int) {
	if m, spread, ok := s.program(); ok && multiple(launches, m, spread) > 0 {
		return
	}
	s.last[s.next] = launches
	s.next = (s.next + 1) % sizeWindow
	s.n = min(s.n+1, sizeWindow)
	if s.told++; s.n == sizeWindow {
		w := s.window()
		if s.told == sizeWindow {
			s.start = lead(w)
		}
		var odd bool
		s.m, s.spread, odd = judge(w, s.start-(s.told-sizeWindow))
		s.varies = s.varies || odd
	}
}

// window is the launches of the window's requests in the order told apart.
func (s *sizes) window() []int {
	if s.n < sizeWindow {
		return slices.Clone(s.last[:s.n])
	}
	return slices.Concat(s.last[s.next:], s.last[:s.next])
}

// judge works the program out from a full window w, in the order its
// busy periods were told apart, less its first start (the process's start
// still in it): the median m of the rest, and the range of their requests
// of about one m (spread). A whole multiple of m is a backlog wherever it
// comes, as add treats one once the program is known: an LC behind its
// arrivals runs them so at any time, not only as it starts. odd: a busy
// period off every multiple, or requests half a request apart: the
// process's requests differ in size.
func judge(w []int, start int) (m, spread int, odd bool) {
	w = w[min(max(start, 0), len(w)-1):]
	v := slices.Sorted(slices.Values(w))
	if m = v[len(v)/2]; m <= 0 {
		return 0, 0, false
	}
	lo, hi := m, m
	for _, l := range v {
		if (l+m/2)/m == 1 {
			lo, hi = min(lo, l), max(hi, l)
		}
	}
	spread = hi - lo
	for _, l := range w {
		odd = odd || (l+m/2)/m != 1 && multiple(l, m, spread) == 0
	}
	return m, spread, odd || 2*spread >= m
}

// lead is how many of w's busy periods came before its first request of
// about its median.
func lead(w []int) int {
	m := slices.Sorted(slices.Values(w))[len(w)/2]
	return max(0, slices.IndexFunc(w, func(l int) bool { return m > 0 && (l+m/2)/m == 1 }))
}

// program is the median request of the window and the range of the
// requests of about one median; ok once the window is full.
func (s *sizes) program() (m, spread int, ok bool) {
	return s.m, s.spread, s.n == sizeWindow && s.m > 0
}

// count is how many requests a busy period of launches holds: k >= 2
// where launches lie within k ranges (of the last requests of about one
// median) of k times their median, and k ranges leave k unambiguous (under half a request); else 1,
// as for a process whose requests differ in size (a decode of varying
// lengths), whose busy periods are never divided.
func (s *sizes) count(launches int) int {
	m, spread, ok := s.program()
	if !ok || s.varies {
		return 1
	}
	if k := multiple(launches, m, spread); k > 0 && 2*k*spread < m {
		return k
	}
	return 1
}

// multiple is k >= 2 where launches lie within k ranges of k times m (a busy period of k
// requests of the program), else 0.
func multiple(launches, m, spread int) int {
	if k := (launches + m/2) / m; k >= 2 && abs(launches-k*m) <= k*spread {
		return k
	}
	return 0
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Count is how many of the process's requests r is: 1, or the requests a
// busy period held that ran back to back (Requests).
func (r Request) Count() int { return max(r.Requests, 1) }

// Each is the latency of each request r holds: its latency over Count.
func (r Request) Each() time.Duration { return r.Latency() / time.Duration(r.Count()) }

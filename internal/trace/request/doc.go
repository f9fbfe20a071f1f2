// Package request is what an LC request is, built from the launch and
// synchronize calls package trace reports (its Call and TaskExit events):
// Delimiter, the one definition of a request that gpreemptd's request gate
// and SLO mode and `gpreemptctl trace requests` share (a busy period of
// the process, from the first launch after a quiet gap it learns to the
// return of the last synchronize before the next one; docs/TRACING.md,
// "Requests"); ThreadTracker, one thread's launches and the synchronize
// after them; and HintTracker, the timeline of a request announced through
// the hint API. Pure logic over events: no BPF, no I/O.
package request

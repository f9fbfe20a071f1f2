package trace

import "fmt"

// Role is what a traced function means for a request's timeline. It travels
// in the top byte of the uprobe's attach cookie.
type Role uint8

const (
	// RoleLaunch: a kernel launch (cuLaunchKernel, cuLaunchKernelEx). The
	// first one opens a request on its thread.
	RoleLaunch Role = iota + 1
	// RoleSync: a synchronization (cuStreamSynchronize,
	// cuEventSynchronize, cuCtxSynchronize). Its return closes the
	// thread's request.
	RoleSync
	// RoleHint: gpreempt_hint, a request announced before its CPU-side
	// preparation (the spinner is launched).
	RoleHint
	// RoleReady: gpreempt_ready, preparation done (the spinner released).
	RoleReady
	// RoleCancel: gpreempt_cancel, the announced request will not come.
	RoleCancel
	// RoleQueue: other work queued on a stream (an input copy, an event
	// record), often before a request's first kernel: it may begin a
	// request, but launches nothing.
	RoleQueue
)

func (r Role) String() string {
	switch r {
	case RoleLaunch:
		return "launch"
	case RoleSync:
		return "sync"
	case RoleHint:
		return "hint"
	case RoleReady:
		return "ready"
	case RoleCancel:
		return "cancel"
	case RoleQueue:
		return "queue"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// The attach cookie: role << 24 | index of the symbol in the tracer's table.
const (
	cookieRoleShift = 24
	cookieIndexMask = 1<<cookieRoleShift - 1
)

func cookie(role Role, index int) uint64 {
	return uint64(role)<<cookieRoleShift | uint64(index)&cookieIndexMask
}

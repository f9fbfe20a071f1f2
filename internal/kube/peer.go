package kube

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpreempt/gpreempt/class"
)

// AuthorizePeer checks a request made over the daemon's socket by the
// process peerPID (from SO_PEERCRED) to give targetPID the class want.
// When peerPID is in a pod, the target must be in the same pod and want
// at most the pod's Limit; a refusal is ErrForbidden, saying why, and is
// recorded as an Event on the requesting pod. When peerPID is in no pod
// the error wraps ErrNotInPod and the daemon's own rules decide.
func (a *Agent) AuthorizePeer(peerPID, targetPID int, want class.Name) (PodRef, error) {
	peer, err := a.PodOfPID(peerPID)
	if err != nil {
		return PodRef{}, fmt.Errorf("peer: %w", err)
	}
	refuse := func(format string, args ...any) (PodRef, error) {
		msg := fmt.Sprintf(format, args...)
		a.Event(peer, corev1.EventTypeWarning, ReasonRequestRefused, msg)
		return peer, fmt.Errorf("%w: pod %s: %s", ErrForbidden, peer, msg)
	}
	target, err := a.PodOfPID(targetPID)
	switch {
	case errors.Is(err, ErrNotInPod) || errors.Is(err, ErrUnknownPod):
		return refuse("pid %d asked for pid %d, which is not in this pod", peerPID, targetPID)
	case err != nil:
		return peer, fmt.Errorf("target: %w", err)
	case target.UID != peer.UID:
		return refuse("pid %d asked for pid %d, which is in another pod", peerPID, targetPID)
	}
	d, ok := a.Decision(peer.UID)
	if !ok {
		return peer, fmt.Errorf("pod %s: %w %s", peer, ErrUnknownPod, a.opts.NodeName)
	}
	if !want.AtMost(d.Limit()) {
		return refuse("pid %d asked for class %s; this pod may have at most %s", peerPID, want, d.Limit())
	}
	return target, nil
}

// Recheck says whether pid, in a pod, may still hold the class want it
// was granted over the socket, under the pod's decision now (the daemon
// asks at every reload and pod change): nil if it may, an error wrapping
// ErrForbidden if its pod may no longer have it. It records no Event. A
// process in no pod is ErrNotInPod: the daemon's own limits decide.
func (a *Agent) Recheck(pid int, want class.Name) error {
	ref, err := a.PodOfPID(pid)
	if err != nil {
		return err
	}
	d, ok := a.Decision(ref.UID)
	if !ok {
		return fmt.Errorf("pod %s: %w %s", ref, ErrUnknownPod, a.opts.NodeName)
	}
	if !want.AtMost(d.Limit()) {
		return fmt.Errorf("%w: pod %s may have at most %s", ErrForbidden, ref, d.Limit())
	}
	return nil
}

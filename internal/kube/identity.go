package kube

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pod returns the cached pod whose cgroup is named after uid.
func (a *Agent) pod(uid string) (*corev1.Pod, error) {
	objs, err := a.informer.GetIndexer().ByIndex(uidIndex, uid)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("pod UID %s: %w %s", uid, ErrUnknownPod, a.opts.NodeName)
}

// PodOfPID returns the pod and container pid runs in. A process in no pod
// is ErrNotInPod; one whose pod the agent does not know, or whose
// container is not (yet) among the containers the pod's status names,
// ErrUnknownPod: its cgroup alone does not make it the pod's.
func (a *Agent) PodOfPID(pid int) (PodRef, error) {
	c, err := a.layout.ContainerOf(a.opts.ProcRoot, pid)
	if err != nil {
		return PodRef{}, err
	}
	pod, err := a.pod(c.PodUID)
	if err != nil {
		return PodRef{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	ref := refOf(pod)
	name, ok := containerName(pod, c.ID)
	if !ok {
		return PodRef{}, fmt.Errorf("pid %d: container %q is not among pod %s's containers: %w %s", pid, c.ID, ref, ErrUnknownPod, a.opts.NodeName)
	}
	ref.Container, ref.ContainerID = name, c.ID
	return ref, nil
}

// podStatuses are the lists of a pod's status that name containers.
func podStatuses(pod *corev1.Pod) [][]corev1.ContainerStatus {
	return [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses}
}

// containerName is the name of the pod's container whose runtime ID is
// id (a cgroup's); false when the pod's status names none such (or id is
// empty).
func containerName(pod *corev1.Pod, id string) (string, bool) {
	if id == "" {
		return "", false
	}
	for _, list := range podStatuses(pod) {
		for _, st := range list {
			if StripRuntimePrefix(st.ContainerID) == id {
				return st.Name, true
			}
		}
	}
	return "", false
}

// containerIDs lists the pod's container IDs, for noticing a new one.
func containerIDs(pod *corev1.Pod) string {
	var ids []string
	for _, list := range podStatuses(pod) {
		for _, st := range list {
			if st.ContainerID != "" {
				ids = append(ids, st.ContainerID)
			}
		}
	}
	return strings.Join(ids, ",")
}

// ClassForPID returns the class pid's pod gets and the pod. When the
// decision is not Managed the Kubernetes policy names no class and the
// daemon's own rules decide. Errors: ErrNotInPod (a host process: the
// daemon's own rules decide), ErrUnknownPod (retry later), fs.ErrNotExist
// (the process exited).
func (a *Agent) ClassForPID(pid int) (Decision, PodRef, error) {
	ref, err := a.PodOfPID(pid)
	if err != nil {
		return Decision{}, PodRef{}, err
	}
	d, ok := a.Decision(ref.UID)
	if !ok {
		return Decision{}, ref, fmt.Errorf("pid %d: pod %s: %w %s", pid, ref, ErrUnknownPod, a.opts.NodeName)
	}
	return d, ref, nil
}

// ProcessesOf lists the processes of the pod (every container) on this
// node, by reading each /proc/PID/cgroup.
func (a *Agent) ProcessesOf(ref PodRef) ([]int, error) {
	pod, err := a.podByAPIUID(ref.UID)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{string(pod.UID): true}
	if h := pod.Annotations[annotationMirror]; h != "" {
		want[h] = true
	}
	entries, err := os.ReadDir(a.opts.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := a.layout.ContainerOf(a.opts.ProcRoot, pid)
		if err != nil {
			continue // exited, or in no pod
		}
		if _, ok := containerName(pod, c.ID); want[c.PodUID] && ok {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (a *Agent) podByAPIUID(uid types.UID) (*corev1.Pod, error) {
	objs, err := a.informer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && pod.UID == uid {
			return pod, nil
		}
	}
	return nil, fmt.Errorf("pod UID %s: %w %s", uid, ErrUnknownPod, a.opts.NodeName)
}

// Package kube is gpreemptd's node agent mode on Kubernetes: it watches the
// pods of its own node, decides each pod's class from its annotations and
// the node policy, maps host processes to their pods through
// /proc/PID/cgroup, records Events on the pods, and checks that a pod asking
// over the daemon's socket asks only for its own processes.
package kube

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotInPod marks a process whose cgroup names no Kubernetes pod: a host
// service, a plain Docker container, or a process that has exited.
var ErrNotInPod = errors.New("not in a Kubernetes pod")

// QoS is a pod's quality-of-service class as kubelet places it in the
// cgroup tree.
type QoS string

const (
	QoSGuaranteed QoS = "guaranteed"
	QoSBurstable  QoS = "burstable"
	QoSBestEffort QoS = "besteffort"
)

// Runtime is the container runtime a cgroup's name points to, or "" where
// the name does not tell (cgroupfs driver with a bare container ID).
type Runtime string

const (
	RuntimeContainerd Runtime = "containerd"
	RuntimeCRIO       Runtime = "cri-o"
	RuntimeDocker     Runtime = "docker"
)

// Container is where a process runs, as its cgroup path says.
type Container struct {
	// PodUID is the pod's UID as kubelet knows it, lower case with dashes
	// (a UUID), or the 32-hex-digit config hash of a static pod.
	PodUID string `json:"podUID"`
	// ID is the container ID without the runtime prefix; empty for a
	// process in the pod's cgroup but in no container's (rare).
	ID      string  `json:"containerID,omitempty"`
	Runtime Runtime `json:"runtime,omitempty"`
	QoS     QoS     `json:"qos"`
	// Conmon is set for CRI-O's container monitor (crio-conmon-ID.scope):
	// it belongs to the pod but is not the container's workload.
	Conmon bool `json:"conmon,omitempty"`
}

// maxCgroupFile bounds what is read of /proc/PID/cgroup: a real one is a
// few hundred bytes to a few KB (one line a v1 hierarchy).
const maxCgroupFile = 64 << 10

// ContainerOf reads /proc/PID/cgroup under procRoot ("/proc" when empty)
// and returns the container pid runs in. A process in no pod gives an
// error wrapping ErrNotInPod; one that has exited, an error wrapping
// fs.ErrNotExist.
func ContainerOf(procRoot string, pid int) (Container, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	path := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	f, err := os.Open(path)
	if err != nil {
		return Container{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return Container{}, fmt.Errorf("pid %d: read %s: %w", pid, path, err)
	}
	c, err := ParseProcCgroup(b)
	if err != nil {
		return Container{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return c, nil
}

// ParseProcCgroup parses the contents of /proc/PID/cgroup: lines of
// "hierarchy-ID:controllers:path", one for the unified (v2) hierarchy
// ("0::/path") and one per v1 hierarchy. The first line whose path names a
// pod wins, the unified one first; a line that names a container beats one
// that names only the pod. Malformed lines are skipped: a file that names
// no pod is ErrNotInPod, whatever else it holds.
func ParseProcCgroup(data []byte) (Container, error) {
	var best Container
	found := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxCgroupFile)
	// Two passes over the lines in one: the unified line is preferred,
	// so remember the best v1 answer and return a v2 one at once.
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		c, ok := ParseCgroupPath(path)
		if !ok {
			continue
		}
		if id == "0" && c.ID != "" {
			return c, nil
		}
		if !found || (best.ID == "" && c.ID != "") {
			best, found = c, true
		}
	}
	if !found {
		return Container{}, fmt.Errorf("cgroup %q: %w", firstLine(data), ErrNotInPod)
	}
	return best, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	const max = 200
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// ParseCgroupPath finds the pod and container in one cgroup path. It
// understands both of kubelet's cgroup drivers:
//
//	systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
//	cgroupfs: /kubepods/burstable/pod<uid>/<id>
//
// with containerd (cri-containerd-<id>.scope), CRI-O (crio-<id>.scope,
// crio-conmon-<id>.scope, crio-<id> under cgroupfs) and Docker
// (docker-<id>.scope) naming. The pod is found anywhere in the path, so a
// kubelet cgroup root other than / (kind's /kubelet.slice/kubelet-kubepods.slice,
// a nested /docker/<id>/kubepods) and a path relative to the reader's own
// cgroup namespace (/../../kubepods-...) both work.
func ParseCgroupPath(path string) (Container, bool) {
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		uid, qos, ok := podSegment(seg, segs[:i])
		if !ok {
			continue
		}
		c := Container{PodUID: uid, QoS: qos}
		if i+1 < len(segs) {
			c.ID, c.Runtime, c.Conmon = containerSegment(segs[i+1])
		}
		return c, true
	}
	return Container{}, false
}

// podSegment recognises a pod's cgroup: "<prefix>-pod<uid>.slice" under
// systemd (the UID's dashes written as underscores, since a dash separates
// the slice's parents), "pod<uid>" under cgroupfs. parents are the
// segments above it, which carry the QoS class under cgroupfs.
func podSegment(seg string, parents []string) (uid string, qos QoS, ok bool) {
	if name, isSlice := strings.CutSuffix(seg, ".slice"); isSlice {
		i := strings.LastIndex(name, "-pod")
		if i < 0 {
			return "", "", false
		}
		prefix := name[:i]
		if prefix != "kubepods" && !strings.HasSuffix(prefix, "-kubepods") && !strings.Contains(prefix, "kubepods-") {
			return "", "", false
		}
		uid, ok := canonicalUID(strings.ReplaceAll(name[i+len("-pod"):], "_", "-"))
		if !ok {
			return "", "", false
		}
		switch {
		case strings.HasSuffix(prefix, "-besteffort"):
			qos = QoSBestEffort
		case strings.HasSuffix(prefix, "-burstable"):
			qos = QoSBurstable
		default:
			qos = QoSGuaranteed
		}
		return uid, qos, true
	}
	rest, isPod := strings.CutPrefix(seg, "pod")
	if !isPod || len(parents) == 0 {
		return "", "", false
	}
	uid, ok = canonicalUID(rest)
	if !ok {
		return "", "", false
	}
	// cgroupfs: kubepods/pod<uid> (guaranteed) or kubepods/<qos>/pod<uid>.
	parent := parents[len(parents)-1]
	switch {
	case parent == "besteffort" && len(parents) >= 2 && parents[len(parents)-2] == "kubepods":
		return uid, QoSBestEffort, true
	case parent == "burstable" && len(parents) >= 2 && parents[len(parents)-2] == "kubepods":
		return uid, QoSBurstable, true
	case parent == "kubepods":
		return uid, QoSGuaranteed, true
	}
	return "", "", false
}

// canonicalUID accepts a UUID (36 characters, dashes at 8, 13, 18, 23) or
// a static pod's 32-hex-digit config hash, in any case, and returns it in
// lower case.
func canonicalUID(s string) (string, bool) {
	s = strings.ToLower(s)
	switch len(s) {
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return "", false
				}
			} else if !isHex(s[i]) {
				return "", false
			}
		}
		return s, true
	case 32:
		for i := 0; i < len(s); i++ {
			if !isHex(s[i]) {
				return "", false
			}
		}
		return s, true
	}
	return "", false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// containerSegment recognises the cgroup of one container directly under
// its pod's.
func containerSegment(seg string) (id string, rt Runtime, conmon bool) {
	name, scope := strings.CutSuffix(seg, ".scope")
	switch {
	case strings.HasPrefix(name, "cri-containerd-"):
		id, rt = name[len("cri-containerd-"):], RuntimeContainerd
	case strings.HasPrefix(name, "crio-conmon-"):
		id, rt, conmon = name[len("crio-conmon-"):], RuntimeCRIO, true
	case strings.HasPrefix(name, "crio-"):
		id, rt = name[len("crio-"):], RuntimeCRIO
	case strings.HasPrefix(name, "docker-"):
		id, rt = name[len("docker-"):], RuntimeDocker
	case !scope:
		id = name // cgroupfs: the bare ID, whichever runtime
	}
	if !isContainerID(id) {
		return "", "", false
	}
	return id, rt, conmon
}

// isContainerID accepts the IDs runtimes use: 64 lower-case hex digits for
// containerd, CRI-O and Docker. Shorter hex strings (at least 12, Docker's
// short form) are accepted too, for runtimes and tests that shorten them.
func isContainerID(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// StripRuntimePrefix turns a container ID as the API server reports it in
// a pod's status ("containerd://<id>", "cri-o://<id>", "docker://<id>")
// into the bare ID the cgroup carries.
func StripRuntimePrefix(statusID string) string {
	if _, id, ok := strings.Cut(statusID, "://"); ok {
		return id
	}
	return statusID
}

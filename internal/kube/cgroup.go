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
	"slices"
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
	// QoS is empty where the path does not say: a cgroupfs pod seen
	// from a cgroup namespace below its QoS level.
	QoS QoS `json:"qos"`
	// Conmon is set for CRI-O's container monitor (crio-conmon-ID.scope):
	// it belongs to the pod but is not the container's workload.
	Conmon bool `json:"conmon,omitempty"`
}

// maxCgroupFile bounds what is read of /proc/PID/cgroup: a real one is a
// few hundred bytes to a few KB (one line a v1 hierarchy).
const maxCgroupFile = 64 << 10

// Layout is where this node's kubelet puts pods in the cgroup tree, and
// how this process sees that tree. A pod is recognised only in the
// kubelet's layout anchored at its cgroup root — never from a component
// named like a pod's cgroup elsewhere in a path: a user with a delegated
// cgroup subtree (systemd's user@UID.service) or a container with a
// writable cgroup can name its cgroups anything.
//
//	systemd:  ROOT/kubepods.slice[/kubepods-QOS.slice]/kubepods[-QOS]-pod<uid_with_underscores>.slice/<container>
//	cgroupfs: ROOT/kubepods[/QOS]/pod<uid>/<container>
//
// where QOS is burstable or besteffort (guaranteed pods have no QoS
// level), and under systemd a ROOT ending in NAME.slice names the
// kubepods slice NAME-kubepods.slice (kind's /kubelet.slice).
type Layout struct {
	// Root is the kubelet's cgroup root as /proc/PID/cgroup shows it
	// ("/" when empty): "/kubelet.slice" on kind's nodes, "/docker/ID"
	// for a kubelet in a Docker container sharing the host's cgroup
	// namespace.
	Root string
	// NSDepth is, per hierarchy ID of /proc/PID/cgroup, how deep below
	// the hierarchy's root this process's cgroup namespace starts (0 for
	// none, or a hierarchy not listed). In its own namespace (a pod's,
	// on a cgroup v2 node) this process sees other cgroups relative to
	// its own ("/../../kubepods-besteffort.slice/..."): the leading ".."
	// then tell at which depth of the layout the path resumes, and the
	// levels above it, which are this process's own ancestors, are the
	// kubelet's. NSDepthOf reads it from pid 1 (the host's init).
	NSDepth map[string]int
}

// NSDepthOf reads, from /proc/1/cgroup under procRoot ("/proc" when
// empty), how deep below each hierarchy's root this process's cgroup
// namespace starts: pid 1 (with the host's PID namespace, the host's
// init) is in a cgroup at or just under the root, so the ".." its path
// starts with climb from this namespace's root to the hierarchy's. A
// file that cannot be read gives nil: paths are then taken as absolute.
func NSDepthOf(procRoot string) map[string]int {
	if procRoot == "" {
		procRoot = "/proc"
	}
	f, err := os.Open(filepath.Join(procRoot, "1", "cgroup"))
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err != nil {
		return nil
	}
	depth := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		n := 0
		for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
			if seg != ".." {
				break
			}
			n++
		}
		depth[id] = n
	}
	return depth
}

// ContainerOf reads /proc/PID/cgroup under procRoot ("/proc" when empty)
// and returns the container pid runs in. A process in no pod is an error
// wrapping ErrNotInPod; one that has exited, an error wrapping
// fs.ErrNotExist.
func (l Layout) ContainerOf(procRoot string, pid int) (Container, error) {
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
	c, err := l.ParseProcCgroup(b)
	if err != nil {
		return Container{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return c, nil
}

// ParseProcCgroup parses the contents of /proc/PID/cgroup: lines of
// "hierarchy-ID:controllers:path", one for the unified (v2) hierarchy
// ("0::/path") and one per v1 hierarchy. The first line whose path is in
// the layout wins, the unified one first; a line that names a container
// beats one that names only the pod. Malformed lines are skipped: a file
// that names no pod is ErrNotInPod, whatever else it holds.
func (l Layout) ParseProcCgroup(data []byte) (Container, error) {
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
		c, ok := l.ParsePath(id, path)
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

// ParsePath finds the pod and container in one cgroup path of hierarchy
// id, as this process reads it: the path must follow the layout from the
// root down to the pod's cgroup, each level at its depth. Below the
// container's cgroup anything goes (a container may make cgroups of its
// own there: they are still its own). Containers are named as containerd
// (cri-containerd-<id>.scope), CRI-O (crio-<id>.scope,
// crio-conmon-<id>.scope, crio-<id> under cgroupfs) and Docker
// (docker-<id>.scope) name them.
func (l Layout) ParsePath(id, path string) (Container, bool) {
	segs := splitPath(path)
	up := 0
	for up < len(segs) && segs[up] == ".." {
		up++
	}
	segs = segs[up:]
	if slices.Contains(segs, "..") || slices.Contains(segs, "") {
		return Container{}, false
	}
	// start is the depth below the hierarchy's root of segs[0]: the
	// levels above it are this process's own ancestors, not seen.
	start := l.NSDepth[id] - up
	if start < 0 {
		return Container{}, false
	}
	root := splitPath(l.Root)
	var found []Container
	for _, sd := range []bool{true, false} {
		for _, qos := range []QoS{QoSGuaranteed, QoSBurstable, QoSBestEffort} {
			if c, ok := matchLayout(root, sd, qos, start, segs); ok {
				found = append(found, c)
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], true
	case len(found) == 2 && found[0].PodUID == found[1].PodUID && found[0].ID == found[1].ID:
		// cgroupfs seen from below its QoS level: burstable or
		// besteffort, the path does not say which.
		c := found[0]
		c.QoS = ""
		return c, true
	}
	return Container{}, false
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// matchLayout matches segs, whose first is at depth start, against the
// layout of one cgroup driver (systemd or cgroupfs) and QoS class under
// root.
func matchLayout(root []string, systemd bool, qos QoS, start int, segs []string) (Container, bool) {
	levels := slices.Clone(root)
	var pod func(seg string) (string, bool)
	if systemd {
		kubepods := "kubepods"
		if n := len(root); n > 0 && strings.HasSuffix(root[n-1], ".slice") {
			kubepods = strings.TrimSuffix(root[n-1], ".slice") + "-kubepods"
		}
		prefix := kubepods
		levels = append(levels, kubepods+".slice")
		if qos != QoSGuaranteed {
			prefix += "-" + string(qos)
			levels = append(levels, prefix+".slice")
		}
		pod = func(seg string) (string, bool) {
			name, ok := strings.CutSuffix(seg, ".slice")
			if !ok {
				return "", false
			}
			uid, ok := strings.CutPrefix(name, prefix+"-pod")
			if !ok {
				return "", false
			}
			return canonicalUID(strings.ReplaceAll(uid, "_", "-"))
		}
	} else {
		levels = append(levels, "kubepods")
		if qos != QoSGuaranteed {
			levels = append(levels, string(qos))
		}
		pod = func(seg string) (string, bool) {
			uid, ok := strings.CutPrefix(seg, "pod")
			if !ok {
				return "", false
			}
			return canonicalUID(uid)
		}
	}
	at := len(levels) - start // the pod's index in segs
	if at < 0 || at >= len(segs) {
		return Container{}, false
	}
	for i := max(start, 0); i < len(levels); i++ {
		if segs[i-start] != levels[i] {
			return Container{}, false
		}
	}
	uid, ok := pod(segs[at])
	if !ok {
		return Container{}, false
	}
	c := Container{PodUID: uid, QoS: qos}
	if at+1 < len(segs) {
		c.ID, c.Runtime, c.Conmon = containerSegment(segs[at+1])
	}
	return c, true
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

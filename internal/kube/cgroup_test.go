package kube

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	uid    = "0b7f6e2c-1c1a-4d4f-9b3e-2f1e3c4d5a6b"
	uidSd  = "0b7f6e2c_1c1a_4d4f_9b3e_2f1e3c4d5a6b"
	cid    = "4e8b1f0c2a7d9e3b5c6f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"
	static = "5f0e8b4c1d2e3f4a5b6c7d8e9f0a1b2c"
)

// The paths below are as kubelet and the runtimes write them, read from
// /proc/PID/cgroup on real nodes of each kind (cgroup driver, runtime,
// cgroup version, QoS class).
func TestParseCgroupPath(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
		path   string
		want   Container
		ok     bool
	}{
		{"v2 systemd containerd burstable", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},
		{"v2 systemd containerd besteffort", Layout{},
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBestEffort}, true},
		{"v2 systemd containerd guaranteed", Layout{},
			"/kubepods.slice/kubepods-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSGuaranteed}, true},
		{"v2 systemd cri-o", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/crio-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeCRIO, QoS: QoSBurstable}, true},
		{"v2 systemd cri-o conmon", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/crio-conmon-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeCRIO, QoS: QoSBurstable, Conmon: true}, true},
		{"v1 systemd docker (cri-dockerd)", Layout{},
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidSd + ".slice/docker-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeDocker, QoS: QoSBestEffort}, true},
		{"process in a sub-cgroup of its container (systemd in a container)", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope/init.scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},
		{"kind: kubelet cgroup root /kubelet.slice", Layout{Root: "/kubelet.slice"},
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBestEffort}, true},
		{"path relative to the reader's cgroup namespace (a burstable pod's)", Layout{NSDepth: map[string]int{"0": 4}},
			"/../../kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},
		{"systemd upper-case UID", Layout{},
			"/kubepods.slice/kubepods-pod" + strings.ToUpper(uidSd) + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSGuaranteed}, true},
		{"static pod (config hash) under systemd", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + static + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: static, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},
		{"pod cgroup only (pause process setup)", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice",
			Container{PodUID: uid, QoS: QoSBurstable}, true},
		{"cgroupfs burstable (containerd or docker)", Layout{},
			"/kubepods/burstable/pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid, QoS: QoSBurstable}, true},
		{"cgroupfs besteffort", Layout{},
			"/kubepods/besteffort/pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid, QoS: QoSBestEffort}, true},
		{"cgroupfs guaranteed", Layout{},
			"/kubepods/pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid, QoS: QoSGuaranteed}, true},
		{"cgroupfs cri-o", Layout{},
			"/kubepods/burstable/pod" + uid + "/crio-" + cid,
			Container{PodUID: uid, ID: cid, Runtime: RuntimeCRIO, QoS: QoSBurstable}, true},
		{"cgroupfs nested in a docker container (kind, k3d)", Layout{Root: "/docker/" + cid},
			"/docker/" + cid + "/kubepods/besteffort/pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid, QoS: QoSBestEffort}, true},
		{"cgroupfs static pod", Layout{},
			"/kubepods/burstable/pod" + static + "/" + cid,
			Container{PodUID: static, ID: cid, QoS: QoSBurstable}, true},
		{"unknown container naming keeps the pod", Layout{},
			"/kubepods/burstable/pod" + uid + "/not-a-container",
			Container{PodUID: uid, QoS: QoSBurstable}, true},

		{"relative, from a besteffort pod's namespace, to a burstable pod", Layout{NSDepth: map[string]int{"0": 4}},
			"/../../../kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},
		{"relative, from a guaranteed pod's namespace (depth 3)", Layout{NSDepth: map[string]int{"0": 3}},
			"/../../kubepods-besteffort.slice/kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBestEffort}, true},
		{"relative cgroupfs, below the QoS level: QoS unknown", Layout{NSDepth: map[string]int{"0": 4}},
			"/../../pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid}, true},
		{"relative cgroupfs, guaranteed", Layout{NSDepth: map[string]int{"0": 4}},
			"/../../../pod" + uid + "/" + cid,
			Container{PodUID: uid, ID: cid, QoS: QoSGuaranteed}, true},
		{"v1 hierarchy's own namespace depth", Layout{NSDepth: map[string]int{"0": 0, "4": 4}},
			"/../../../kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"a container's own sub-cgroup named like another pod is still its own", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid +
				".scope/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(static, "-", "_") + ".slice/cri-containerd-" + strings.Repeat("e", 64) + ".scope",
			Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}, true},

		{"root", Layout{}, "/", Container{}, false},
		// Named like a pod's cgroup, but not where the kubelet puts pods:
		// a user's delegated subtree (systemd's user@UID.service), or any
		// cgroup whose parent is not the kubelet's.
		{"delegated user subtree named like the kubepods tree", Layout{},
			"/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"delegated user subtree with a pod's slice", Layout{},
			"/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"kubepods tree under another parent", Layout{},
			"/gpreempt-test/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"kind's layout without kind's root", Layout{},
			"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"default layout under kind's root", Layout{Root: "/kubelet.slice"},
			"/kubepods.slice/kubepods-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"pod slice at the root", Layout{},
			"/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"pod slice under the wrong QoS slice", Layout{},
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"guaranteed pod slice under a QoS slice", Layout{},
			"/kubepods.slice/kubepods-burstable.slice/kubepods-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"cgroupfs kubepods under another parent", Layout{},
			"/home/kubepods/burstable/pod" + uid + "/" + cid,
			Container{}, false},
		{"cgroupfs pod under an unknown QoS", Layout{},
			"/kubepods/gold/pod" + uid + "/" + cid,
			Container{}, false},
		{"relative path without a namespace depth", Layout{},
			"/../../kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"relative path climbing above the root", Layout{NSDepth: map[string]int{"0": 1}},
			"/../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"relative path into a user's subtree", Layout{NSDepth: map[string]int{"0": 4}},
			"/../../../../user.slice/user-1000.slice/user@1000.service/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"relative path resuming at the wrong depth", Layout{NSDepth: map[string]int{"0": 4}},
			"/../kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},
		{"dot-dot inside a path", Layout{},
			"/kubepods.slice/../kubepods.slice/kubepods-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope",
			Container{}, false},

		{"host service", Layout{}, "/system.slice/containerd.service", Container{}, false},
		{"user session", Layout{}, "/user.slice/user-1000.slice/session-3.scope", Container{}, false},
		{"plain docker container", Layout{}, "/system.slice/docker-" + cid + ".scope", Container{}, false},
		{"plain docker cgroupfs", Layout{}, "/docker/" + cid, Container{}, false},
		{"kubepods QoS slice itself", Layout{}, "/kubepods.slice/kubepods-burstable.slice", Container{}, false},
		{"pod segment not under kubepods", Layout{}, "/foo/pod" + uid + "/" + cid, Container{}, false},
		{"slice not from kubelet", Layout{}, "/machine.slice/machine-pod" + uidSd + ".slice", Container{}, false},
		{"short UID", Layout{}, "/kubepods/pod0b7f6e2c-1c1a/" + cid, Container{}, false},
		{"UID with a misplaced dash", Layout{}, "/kubepods/pod0b7f6e2c1-c1a-4d4f-9b3e-2f1e3c4d5a6b/" + cid, Container{}, false},
		{"UID not hex", Layout{}, "/kubepods/podzb7f6e2c-1c1a-4d4f-9b3e-2f1e3c4d5a6b/" + cid, Container{}, false},
		{"empty", Layout{}, "", Container{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.layout.ParsePath("0", tt.path)
			if ok != tt.ok || got != tt.want {
				t.Errorf("%+v.ParsePath(%q)\n got %+v, %v\nwant %+v, %v", tt.layout, tt.path, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	sdPath := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope"
	want := Container{PodUID: uid, ID: cid, Runtime: RuntimeContainerd, QoS: QoSBurstable}
	tests := []struct {
		name    string
		file    string
		want    Container
		wantErr error
	}{
		{"cgroup v2", "0::" + sdPath + "\n", want, nil},
		{"cgroup v2 without a trailing newline", "0::" + sdPath, want, nil},
		{"cgroup v1 systemd, all hierarchies",
			"12:hugetlb:" + sdPath + "\n11:memory:" + sdPath + "\n10:cpu,cpuacct:" + sdPath + "\n1:name=systemd:" + sdPath + "\n0::/\n",
			want, nil},
		{"cgroup v1 cgroupfs",
			"12:pids:/kubepods/besteffort/pod" + uid + "/" + cid + "\n11:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n",
			Container{PodUID: uid, ID: cid, QoS: QoSBestEffort}, nil},
		{"hybrid: the unified line wins over v1 lines",
			"4:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n0::" + sdPath + "\n",
			want, nil},
		{"a line with the container beats one with only the pod",
			"5:cpu:/kubepods/burstable/pod" + uid + "\n4:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n",
			Container{PodUID: uid, ID: cid, QoS: QoSBurstable}, nil},
		{"malformed lines skipped", "garbage\n0:no-second-colon\n0::" + sdPath + "\n", want, nil},
		{"host process v2", "0::/system.slice/kubelet.service\n", Container{}, ErrNotInPod},
		{"host process v1", "9:name=systemd:/\n8:pids:/\n0::/\n", Container{}, ErrNotInPod},
		{"empty file", "", Container{}, ErrNotInPod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Layout{}.ParseProcCgroup([]byte(tt.file))
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestContainerOf(t *testing.T) {
	root := t.TempDir()
	write := func(pid, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100", "0::/kubepods/besteffort/pod"+uid+"/"+cid+"\n")
	write("200", "0::/system.slice/sshd.service\n")

	if c, err := (Layout{}).ContainerOf(root, 100); err != nil || c.PodUID != uid || c.ID != cid {
		t.Errorf("pid 100: got %+v, %v", c, err)
	}
	if _, err := (Layout{}).ContainerOf(root, 200); !errors.Is(err, ErrNotInPod) || !strings.Contains(err.Error(), "pid 200") {
		t.Errorf("pid 200: got %v, want ErrNotInPod naming the pid", err)
	}
	if _, err := (Layout{}).ContainerOf(root, 300); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid 300 (gone): got %v, want ErrNotExist", err)
	}
	// This test process itself is in no pod here (or, run inside a pod,
	// in one): either way the real file parses without error or with
	// ErrNotInPod.
	if _, err := (Layout{}).ContainerOf("", os.Getpid()); err != nil && !errors.Is(err, ErrNotInPod) {
		t.Errorf("own pid: %v", err)
	}
}

func TestStripRuntimePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"containerd://" + cid: cid,
		"cri-o://" + cid:      cid,
		"docker://" + cid:     cid,
		cid:                   cid,
		"":                    "",
	} {
		if got := StripRuntimePrefix(in); got != want {
			t.Errorf("StripRuntimePrefix(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseProcCgroup: /proc/PID/cgroup is written from names any
// container runtime or user with a delegated subtree chooses.
func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope\n"))
	f.Add([]byte("12:pids:/kubepods/besteffort/pod" + uid + "/" + cid + "\n0::/\n"))
	f.Add([]byte("0::/../kubepods-pod" + static + ".slice/crio-conmon-" + cid + ".scope"))
	f.Add([]byte("0::/../../../kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidSd + ".slice/cri-containerd-" + cid + ".scope\n1:cpu:/../pod" + uid + "/" + cid))
	f.Add([]byte("::\n:\n0::/kubepods/pod/\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Layout{Root: "/kubelet.slice", NSDepth: map[string]int{"0": 4, "1": 2}}.ParseProcCgroup(data)
		if err != nil {
			if !errors.Is(err, ErrNotInPod) {
				t.Fatalf("error %v does not wrap ErrNotInPod", err)
			}
			if c != (Container{}) {
				t.Fatalf("error with a result %+v", c)
			}
			return
		}
		if _, ok := canonicalUID(c.PodUID); !ok || c.PodUID != strings.ToLower(c.PodUID) {
			t.Fatalf("pod UID %q not canonical", c.PodUID)
		}
		if c.ID != "" && !isContainerID(c.ID) {
			t.Fatalf("container ID %q not an ID", c.ID)
		}
		switch c.QoS {
		case QoSGuaranteed, QoSBurstable, QoSBestEffort, "":
		default:
			t.Fatalf("QoS %q", c.QoS)
		}
	})
}

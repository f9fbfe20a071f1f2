// Package k8se2e tests gpreempt's node agent against a real kube-apiserver
// and etcd (built by hack/k8s/build.sh, started as local processes on
// 127.0.0.1), with real processes in cgroups named the way kubelet and
// containerd name them, the fake RM driver replaying the real libcuda
// trace for their GPU contexts, and gpreemptd itself (scan mode) wired to
// the agent as `gpreemptd --kubernetes` wires it. Run it with
// `make e2e-k8s`.
package k8se2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/daemon"
	daemoncmd "github.com/gpreempt/gpreempt/internal/daemon/cmd"
	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/kube"
	"github.com/gpreempt/gpreempt/internal/rmfake"
)

const (
	thisNode  = "gpu-node-a"
	otherNode = "gpu-node-b"
	// The chart's namespace and service account (deploy/kubernetes).
	agentNamespace      = "gpreempt"
	agentServiceAccount = "gpreempt"
)

var (
	repoRoot  = filepath.Join("..", "..", "..")
	tracePath = filepath.Join(repoRoot, "testdata", "h100-580.159.04-alloc-sequence.txt")
	manifests = filepath.Join(repoRoot, "deploy", "kubernetes", "gpreempt.yaml")
	// The chart with request tracing on (its libcuda mount and flags).
	tracingManifests = filepath.Join("testdata", "gpreempt-request-tracing.yaml")
)

// The node policy of the test: training may ask for at most burstable
// and gets be by default; inference may ask for lc.
const policyYAML = `
namespaces:
  training: be
maxClass:
  default: burstable
  namespaces:
    inference: lc
`

// deadline bounds every wait: generous, since a loaded CI runner may take
// seconds for what takes milliseconds on an idle one.
const deadline = 2 * time.Minute

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", deadline, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type testPod struct {
	ns, name, node string
	ann            map[string]string
	cgroupDriver   string // "systemd" or "cgroupfs"
	qos            string // "besteffort", "burstable", "" (guaranteed)

	uid types.UID
	cid string
	pid int
}

// cgroup is the pod's container cgroup as kubelet + containerd name it.
func (p *testPod) cgroup() string {
	switch p.cgroupDriver {
	case "systemd":
		u := strings.ReplaceAll(string(p.uid), "-", "_")
		if p.qos == "" {
			return "kubepods.slice/kubepods-pod" + u + ".slice/cri-containerd-" + p.cid + ".scope"
		}
		return fmt.Sprintf("kubepods.slice/kubepods-%[1]s.slice/kubepods-%[1]s-pod%[2]s.slice/cri-containerd-%[3]s.scope", p.qos, u, p.cid)
	default:
		if p.qos == "" {
			return "kubepods/pod" + string(p.uid) + "/" + p.cid
		}
		return "kubepods/" + p.qos + "/pod" + string(p.uid) + "/" + p.cid
	}
}

func TestNodeAgent(t *testing.T) {
	cfg := startControlPlane(t)
	cgroups := newCgroupTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(cfg)

	// The chart's rendered manifests: every object passes a server-side
	// dry run (schema, defaults, admission); the namespace and RBAC are
	// then applied for real and the agent runs as the chart's service
	// account, so missing permissions fail here.
	objs := readManifests(t, manifests)
	var ns, rbac []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace":
			ns = append(ns, o)
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	if len(ns) != 1 || len(rbac) < 3 {
		t.Fatalf("%s: want a Namespace and the RBAC objects, got kinds %v", manifests, kinds(objs))
	}
	if err := applyManifests(ctx, cfg, ns, false); err != nil {
		t.Fatal(err)
	}
	if err := applyManifests(ctx, cfg, objs, true); err != nil {
		t.Fatal(err)
	}
	if err := applyManifests(ctx, cfg, rbac, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d objects (%v) accepted by a server-side dry run", manifests, len(objs), kinds(objs))
	t.Run("the service account may do only what the agent does", func(t *testing.T) {
		checkServiceAccountRights(ctx, t, admin)
	})
	var tracing []*unstructured.Unstructured
	for _, o := range readManifests(t, tracingManifests) {
		if o.GetKind() == "DaemonSet" {
			tracing = append(tracing, o)
		}
	}
	if len(tracing) != 1 {
		t.Fatalf("%s: want one DaemonSet, got %d", tracingManifests, len(tracing))
	}
	if err := applyManifests(ctx, cfg, tracing, true); err != nil {
		t.Fatalf("%s: %v", tracingManifests, err)
	}
	t.Logf("%s: the DaemonSet accepted by a server-side dry run", tracingManifests)

	for _, n := range []string{"inference", "training"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	server := &testPod{ns: "inference", name: "server", node: thisNode, cgroupDriver: "systemd", qos: "burstable",
		ann: map[string]string{kube.AnnotationClass: "lc", kube.AnnotationLatencyObjective: "500us"}}
	trainer := &testPod{ns: "training", name: "trainer", node: thisNode, cgroupDriver: "cgroupfs", qos: "besteffort",
		ann: map[string]string{kube.AnnotationClass: "be"}}
	greedy := &testPod{ns: "training", name: "greedy", node: thisNode, cgroupDriver: "systemd", qos: "",
		ann: map[string]string{kube.AnnotationClass: "lc"}}
	elsewhere := &testPod{ns: "inference", name: "elsewhere", node: otherNode, cgroupDriver: "systemd", qos: "besteffort",
		ann: map[string]string{kube.AnnotationClass: "be"}}
	pods := []*testPod{server, trainer, greedy, elsewhere}

	rm := rmfake.New()
	trace, err := rmfake.ParseTraceFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	ctlFD := trace[0].FD
	for i, p := range pods {
		created, err := admin.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Annotations: p.ann},
			Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "main", Image: "cuda-app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.uid = created.UID
		p.cid = fmt.Sprintf("%064x", 0xc0ffee00+i)
		// What kubelet reports once the container runs.
		created.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + p.cid, Image: "cuda-app", ImageID: "cuda-app"}}
		if _, err := admin.CoreV1().Pods(p.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The elsewhere pod runs on the other node; a process here whose
		// cgroup claims it (or a pod of the same UID) must be left alone.
		p.pid = cgroups.start(p.cgroup())
		if _, err := rm.Replay(rm.NewProc(p.pid), trace); err != nil {
			t.Fatal(err)
		}
	}
	timeslices := func(p *testPod) []uint64 {
		var ts []uint64
		for _, g := range rm.Groups(p.pid, ctlFD) {
			ts = append(ts, uint64(g.Timeslice))
		}
		return ts
	}
	// libcuda's own settings after channel setup: compute 2048 us, copy 1024 us.
	driverDefaults := fmt.Sprint([]uint64{2048, 1024, 1024, 1024})
	if got := fmt.Sprint(timeslices(elsewhere)); got != driverDefaults {
		t.Fatalf("replayed process: timeslices %s, want %s", got, driverDefaults)
	}

	// The agent, as the chart's service account.
	saCfg := rest.CopyConfig(cfg)
	saCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + agentNamespace + ":" + agentServiceAccount}
	policy, err := kube.ParsePolicy([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	agent, err := kube.NewAgent(kubernetes.NewForConfigOrDie(saCfg), kube.Options{NodeName: thisNode, Policy: policy, CgroupRoot: cgroups.kubeletRoot()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := agent.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	if err := agent.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	// gpreemptd itself, in scan mode over the fake RM, wired to the agent
	// exactly as `gpreemptd --kubernetes` wires it. Its own policy leaves
	// processes outside the Kubernetes policy alone.
	dir := t.TempDir()
	polFile := filepath.Join(dir, "gpreemptd.yaml")
	if err := os.WriteFile(polFile, []byte("version: 1\ndefault: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dcfg := daemon.Config{PolicyFile: polFile, Socket: filepath.Join(dir, "run", "gpreemptd.sock"), Mode: "scan",
		ScanInterval: 20 * time.Millisecond, PolicyPoll: -1, Host: rm.Host(), GPU: gpu.Null{}, Log: log}
	hooked := daemoncmd.KubeHook(ctx, agent, &dcfg, log)
	d, err := daemon.New(ctx, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	hooked(d)
	wg.Go(func() {
		if err := d.Run(ctx); err != nil {
			t.Error(err)
		}
	})

	us := func(d time.Duration) uint64 { return uint64(d / time.Microsecond) }
	want := func(p *testPod, per uint64) {
		t.Helper()
		w := fmt.Sprint([]uint64{per, per, per, per})
		waitFor(t, fmt.Sprintf("%s/%s's 4 groups at %d us", p.ns, p.name, per), func() (bool, string) {
			got := fmt.Sprint(timeslices(p))
			return got == w, got
		})
	}

	t.Run("annotated pods classed on the fake RM", func(t *testing.T) {
		want(server, us(class.DefaultLCTimeslice))
		want(trainer, us(class.DefaultBETimeslice))
		d, ref, err := agent.ClassForPID(server.pid)
		if err != nil || ref.Name != "server" || ref.Container != "main" || d.LatencyObjective != 500*time.Microsecond {
			t.Errorf("ClassForPID(server) = %+v, %+v, %v", d, ref, err)
		}
	})

	t.Run("metrics name the pod of each GPU process", func(t *testing.T) {
		waitFor(t, "gpreemptd_pod_process_info for the server pod", func() (bool, string) {
			mfs, err := d.Metrics().Registry.Gather()
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, mf := range mfs {
				if mf.GetName() != "gpreemptd_pod_process_info" {
					continue
				}
				for _, m := range mf.GetMetric() {
					l := map[string]string{}
					for _, lp := range m.GetLabel() {
						l[lp.GetName()] = lp.GetValue()
					}
					if l["process"] == d.Metrics().ProcessLabel(server.pid) && l["namespace"] == "inference" && l["pod"] == "server" && l["container"] == "main" {
						return true, ""
					}
					seen = append(seen, fmt.Sprint(l))
				}
			}
			return false, fmt.Sprintf("series %v", seen)
		})
	})

	t.Run("an Event records the class", func(t *testing.T) {
		waitEvent(t, admin, trainer, kube.ReasonClassed, "classed be: 4 channel groups")
	})

	t.Run("a forbidden class is refused with an Event", func(t *testing.T) {
		waitEvent(t, admin, greedy, kube.ReasonClassRefused, `gpreempt.io/class="lc": namespace training may ask for at most burstable`)
		want(greedy, us(class.DefaultBETimeslice)) // the namespace's class instead
	})

	t.Run("the other node's pods are ignored", func(t *testing.T) {
		if _, ok := agent.Decision(elsewhere.uid); ok {
			t.Error("the agent holds a decision for a pod of another node")
		}
		if _, _, err := agent.ClassForPID(elsewhere.pid); !errors.Is(err, kube.ErrUnknownPod) {
			t.Errorf("ClassForPID(process claiming the other node's pod) = %v, want ErrUnknownPod", err)
		}
		if got := fmt.Sprint(timeslices(elsewhere)); got != driverDefaults {
			t.Errorf("the other node's pod's process: timeslices %s, want the driver's %s", got, driverDefaults)
		}
	})

	t.Run("an annotation change is re-applied", func(t *testing.T) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"burstable",%q:"2"}}}`, kube.AnnotationClass, kube.AnnotationWeight)
		if _, err := admin.CoreV1().Pods(trainer.ns).Patch(ctx, trainer.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		// Weight 2: the slice overhead plus twice the rest (3980 us).
		ts, err := class.Defaults()[class.Burstable].TimesliceFor(2)
		if err != nil {
			t.Fatal(err)
		}
		want(trainer, us(ts))
		waitEvent(t, admin, trainer, kube.ReasonClassed, "classed burstable:2: 4 channel groups")
	})

	t.Run("a pod's socket request for another pod's pid is refused", func(t *testing.T) {
		sock := dcfg.Socket
		for _, tt := range []struct {
			name   string
			target *testPod
			class  class.Name
			status int
		}{
			{"own pid, own class", server, class.LC, http.StatusOK},
			{"another pod's pid", trainer, class.BE, http.StatusForbidden},
		} {
			t.Run(tt.name, func(t *testing.T) {
				// The client is a real process in the server pod's
				// container cgroup: the socket learns its pid from
				// SO_PEERCRED.
				status, body := requestFromPod(t, cgroups, server, sock, fmt.Sprintf(`{"pid":%d,"class":%q}`, tt.target.pid, tt.class))
				if status != tt.status {
					t.Errorf("status %d (%s), want %d", status, body, tt.status)
				}
			})
		}
		waitEvent(t, admin, server, kube.ReasonRequestRefused, "which is in another pod")
	})
}

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind())
	}
	return ks
}

func waitEvent(t *testing.T, client kubernetes.Interface, p *testPod, reason, substr string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a %s Event on %s/%s saying %q", reason, p.ns, p.name, substr), func() (bool, string) {
		evs, err := client.CoreV1().Events(p.ns).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + p.name,
		})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, substr) && e.Source.Host == thisNode {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events %q", seen)
	})
}

// requestFromPod runs curl as a process of pod p's container (placed in
// its cgroup before it connects), POSTs a class request to the daemon's
// socket and returns the HTTP status and body.
func requestFromPod(t *testing.T, ct *cgroupTree, p *testPod, sock, body string) (int, string) {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("curl is needed to make a request from inside a pod's cgroup: %v", err)
	}
	cmd := exec.Command("sh", "-c", `read go && exec "$0" -s -o /dev/stdout -w '\n%{http_code}' --unix-socket "$1" -H 'Content-Type: application/json' -d "$2" http://gpreemptd/v1/class`, curl, sock, body)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ct.place(cmd.Process.Pid, p.cgroup())
	io.WriteString(stdin, "go\n")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("curl: %v: %s", err, out.String())
	}
	text := out.String()
	i := strings.LastIndex(text, "\n")
	reply, code := text[:max(i, 0)], text[i+1:]
	status, err := strconv.Atoi(strings.TrimSpace(code))
	if err != nil {
		t.Fatalf("curl output %q", out.String())
	}
	return status, reply
}

// testWriter sends the daemon's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// checkServiceAccountRights asks the API server (SubjectAccessReview, as
// admin) what the chart's service account may do: list and watch pods
// (RBAC cannot scope that to the node's pods), create and patch Events,
// and nothing else the agent does not do.
func checkServiceAccountRights(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	tests := []struct {
		verb, group, resource, namespace string
		allowed                          bool
	}{
		{"list", "", "pods", "", true},
		{"watch", "", "pods", "", true},
		{"get", "", "pods", "inference", false},
		{"create", "", "pods", "inference", false},
		{"delete", "", "pods", "inference", false},
		{"patch", "", "pods", "inference", false},
		{"create", "", "events", "inference", true},
		{"patch", "", "events", "training", true},
		{"update", "", "events", "inference", false},
		{"delete", "", "events", "inference", false},
		{"list", "", "events", "inference", false},
		{"create", "events.k8s.io", "events", "inference", false},
		{"get", "", "secrets", "inference", false},
		{"list", "", "configmaps", "", false},
		{"list", "", "nodes", "", false},
	}
	user := "system:serviceaccount:" + agentNamespace + ":" + agentServiceAccount
	review := func(verb, group, resource, namespace string) (*authorizationv1.SubjectAccessReview, error) {
		return admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + agentNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: group, Resource: resource, Namespace: namespace,
				},
			},
		}, metav1.CreateOptions{})
	}
	// The RBAC authorizer reads the role and its binding from caches that follow the writes a
	// moment later: wait until every right granted shows before judging any.
	waitFor(t, "every right granted to the service account", func() (bool, string) {
		for _, tt := range tests {
			if !tt.allowed {
				continue
			}
			r, err := review(tt.verb, tt.group, tt.resource, tt.namespace)
			if err != nil {
				return false, fmt.Sprintf("%s %s %s: %v", tt.verb, tt.resource, tt.namespace, err)
			}
			if !r.Status.Allowed {
				return false, fmt.Sprintf("%s %s %s: %q", tt.verb, tt.resource, tt.namespace, r.Status.Reason)
			}
		}
		return true, ""
	})
	for _, tt := range tests {
		name := tt.verb + " " + tt.resource
		if tt.group != "" {
			name += "." + tt.group
		}
		if tt.namespace != "" {
			name += " in " + tt.namespace
		}
		t.Run(name, func(t *testing.T) {
			r, err := review(tt.verb, tt.group, tt.resource, tt.namespace)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != tt.allowed {
				t.Errorf("allowed %v (%s), want %v", r.Status.Allowed, r.Status.Reason, tt.allowed)
			}
		})
	}
}

package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/daemon"
	"github.com/gpreempt/gpreempt/internal/daemon/gate"
	"github.com/gpreempt/gpreempt/internal/kube"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
)

// kubeFlags are node agent mode's flags (docs/KUBERNETES.md).
var kubeFlags = []cli.Flag{
	&cli.BoolFlag{Name: "kubernetes", Usage: "node agent mode: class the processes of this node's pods by their gpreempt.io/class annotation, before the policy's rules", EnvVars: []string{"GPREEMPTD_KUBERNETES"}},
	&cli.StringFlag{Name: "node-name", Usage: "this node's name in the API (default: $NODE_NAME, set from the downward API)"},
	&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)"},
	&cli.StringFlag{Name: "kubernetes-policy", Usage: "the Kubernetes policy file: classes by priority class and namespace, the highest class each namespace may ask for", EnvVars: []string{"GPREEMPTD_KUBERNETES_POLICY"}},
	&cli.StringFlag{Name: "kubelet-cgroup-root", Value: "/", Usage: "the kubelet's cgroup root as /proc/PID/cgroup names it (kind: /kubelet.slice): pods are recognised only in the kubelet's layout under it", EnvVars: []string{"GPREEMPTD_KUBELET_CGROUP_ROOT"}},
}

// startKube starts the node agent when --kubernetes is set and hooks it
// into cfg: its class decisions come before the policy's rules, classings
// are recorded as Events on the pods, socket requests from pods are
// checked against their pod. It returns a function that re-classes a
// pod's processes whenever its decision changes, to run once the daemon
// exists; nil without --kubernetes.
func startKube(ctx context.Context, c *cli.Context, cfg *daemon.Config, log *slog.Logger) (func(*daemon.Daemon), error) {
	if !c.Bool("kubernetes") {
		return nil, nil
	}
	node, err := kube.NodeName(c.String("node-name"))
	if err != nil {
		return nil, err
	}
	var pol *kube.Policy
	var polBytes []byte
	polFile := c.String("kubernetes-policy")
	if polFile != "" {
		if polBytes, err = os.ReadFile(polFile); err != nil {
			return nil, fmt.Errorf("--kubernetes-policy: %w", err)
		}
		if pol, err = kube.ParsePolicy(polBytes); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", policy.ErrInvalid, polFile, err)
		}
	}
	rc, err := kube.RESTConfig(c.String("kubeconfig"))
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "gpreemptd/" + Version
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	root := c.String("kubelet-cgroup-root")
	if !strings.HasPrefix(root, "/") {
		return nil, fmt.Errorf("%w: --kubelet-cgroup-root %q: want an absolute cgroup path, such as / or /kubelet.slice", policy.ErrInvalid, root)
	}
	agent, err := kube.NewAgent(client, kube.Options{NodeName: node, Policy: pol, CgroupRoot: root, Log: log.With("component", "kube")})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := agent.Run(ctx); err != nil {
			log.Error("kubernetes agent stopped", "err", err)
		}
	}()
	if err := agent.WaitForSync(ctx); err != nil {
		return nil, err
	}
	log.Info("node agent mode", "node", node)
	if polFile != "" && c.Duration("policy-poll") > 0 {
		go watchKubePolicy(ctx, agent, polFile, polBytes, c.Duration("policy-poll"), log)
	}

	return KubeHook(ctx, agent, cfg, log), nil
}

// KubeHook wires a running, synced node agent into a daemon's cfg: the
// agent's class decisions come before the policy's rules, each classing
// is recorded as an Event on the pod, socket requests from processes in
// pods are checked against their pod. Call the returned function with the
// daemon made from cfg: it re-classes whenever a pod's decision changes.
func KubeHook(ctx context.Context, agent *kube.Agent, cfg *daemon.Config, log *slog.Logger) func(*daemon.Daemon) {
	cfg.Reconcile.Classifier = agent
	// An LC pod's latency endpoint is its annotations' port at its own
	// address.
	cfg.MetricsEndpoint = agent.MetricsEndpoint
	// The reconciler reports every classing, also a re-check that changed
	// nothing (after any pod's change all processes are decided again):
	// one Event per process and class is enough.
	var mu sync.Mutex
	recorded := map[int]string{}
	cfg.Reconcile.OnClassed = func(pid int, d policy.Decision, groups []reconcile.GroupState) {
		ref, err := agent.PodOfPID(pid)
		if err != nil {
			return // not in a pod of this node
		}
		msg := classedMessage(d, groups)
		mu.Lock()
		if recorded[pid] == msg {
			mu.Unlock()
			return
		}
		if len(recorded) >= maxRecorded { // pids that exited: start over
			clear(recorded)
		}
		recorded[pid] = msg
		mu.Unlock()
		agent.Event(ref, corev1.EventTypeNormal, kube.ReasonClassed, msg)
	}
	cfg.PodCheck = func(peerPID, targetPID int, want class.Name) (bool, error) {
		_, err := agent.AuthorizePeer(peerPID, targetPID, want)
		if errors.Is(err, kube.ErrNotInPod) {
			return false, nil
		}
		return true, err
	}
	cfg.Reconcile.PodRecheck = func(pid int, want class.Name) (bool, error) {
		err := agent.Recheck(pid, want)
		if errors.Is(err, kube.ErrNotInPod) {
			return false, nil
		}
		return true, err
	}
	// A process in a pod counts against its pod's share of the socket's
	// connections and requests in flight: a node's pods may all run as
	// root, and one must not starve the others.
	cfg.PeerKey = podPeerKey(agent.PodOfPID)
	// Likewise an LC's part of the request gate's share: a pod's.
	cfg.Tenant = func(pid int) string {
		if ref, err := agent.PodOfPID(pid); err == nil {
			return "pod " + ref.Namespace + "/" + ref.Name
		}
		return gate.UIDTenant(pid)
	}
	return func(d *daemon.Daemon) {
		d.Metrics().Registry.MustRegister(kube.NewPodInfoCollector(agent, d.Reconciler().Known, d.Metrics().ProcessLabel))
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case ch := <-agent.Changes():
					if !ch.Deleted {
						log.Debug("pod changed: re-classing", "pod", ch.Pod.String(), "decision", ch.Decision.String())
						d.Reconciler().Reclass()
					}
				}
			}
		}()
	}
}

// watchKubePolicy re-reads the Kubernetes policy file every interval
// (a ConfigMap update swaps the mounted file) and gives a changed one to
// the agent; a bad one is logged and the running policy kept.
func watchKubePolicy(ctx context.Context, agent *kube.Agent, file string, last []byte, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(file)
		if err != nil || bytes.Equal(b, last) {
			continue
		}
		last = b
		pol, err := kube.ParsePolicy(b)
		if err == nil {
			err = agent.SetPolicy(pol)
		}
		if err != nil {
			log.Error("kubernetes policy not reloaded, the running one kept", "file", file, "err", err)
			continue
		}
		log.Info("kubernetes policy reloaded", "file", file)
	}
}

// maxRecorded bounds the memory of which Events were recorded.
const maxRecorded = 4096

// classedMessage is the Event's text: "classed be: 4 channel groups on GPU 0".
func classedMessage(d policy.Decision, groups []reconcile.GroupState) string {
	gpus := map[string]bool{}
	for _, g := range groups {
		if g.GPU != "" {
			gpus[g.GPU] = true
		}
	}
	names := slices.Sorted(maps.Keys(gpus))
	msg := fmt.Sprintf("classed %s: %d channel groups", d.Spec, len(groups))
	switch len(names) {
	case 0:
	case 1:
		msg += " on GPU " + names[0]
	default:
		msg += " on GPUs " + strings.Join(names, ", ")
	}
	return msg
}

// podPeerKey names a socket connection's share by its peer's pod, where
// the peer is in one (podOf answers), else by its uid.
func podPeerKey(podOf func(pid int) (kube.PodRef, error)) func(net.Conn) (string, error) {
	return func(c net.Conn) (string, error) {
		p, err := server.PeerOf(c)
		if err != nil {
			return "", err
		}
		if ref, err := podOf(p.PID); err == nil {
			return "pod " + ref.Namespace + "/" + ref.Name, nil
		}
		return "uid " + strconv.FormatUint(uint64(p.UID), 10), nil
	}
}

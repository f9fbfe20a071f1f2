package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/gpreempt/gpreempt/class"
)

var (
	// ErrUnknownPod marks a process whose cgroup names a pod the agent
	// does not know: not (yet) in its cache of this node's pods. A pod
	// just created is seen within the watch's latency; a pod of another
	// node never is.
	ErrUnknownPod = errors.New("pod not known on this node")
	// ErrForbidden marks a socket request the pod may not make.
	ErrForbidden = errors.New("forbidden")
)

// Event reasons the agent and the daemon record on pods.
const (
	// ReasonClassed: the pod's processes were given their class
	// ("classed be: 4 channel groups on GPU 0"). The daemon records it.
	ReasonClassed = "GPUClassed"
	// ReasonClassRefused: an annotation was refused by the node policy or
	// could not be parsed; the message says which and why.
	ReasonClassRefused = "GPUClassRefused"
	// ReasonRequestRefused: a process of the pod asked the daemon's
	// socket for something the pod may not have.
	ReasonRequestRefused = "GPURequestRefused"
)

// PodRef names a pod, and where known the container of a process in it.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the pod's UID in the API (for a static pod, the mirror
	// pod's, not the hash its cgroup is named after).
	UID types.UID `json:"uid"`
	// Container and ContainerID are set by the PID lookups; Container is
	// empty until the pod's status names the container.
	Container   string `json:"container,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
}

func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

// Change says that a pod's decision changed (its annotations, its
// priority class, the policy) or that the pod is gone: the daemon re-classes
// the pod's processes (ProcessesOf) with ClassForPID.
type Change struct {
	Pod      PodRef
	Decision Decision
	Deleted  bool
}

// Options configure an Agent.
type Options struct {
	// NodeName is this node's name as the API knows it (the downward
	// API's spec.nodeName, NODE_NAME in the DaemonSet). Required.
	NodeName string
	// Policy is the Kubernetes part of the node policy; nil allows every
	// class and classes only annotated pods.
	Policy *Policy
	// ProcRoot is where /proc is mounted; "/proc" when empty.
	ProcRoot string
	// CgroupRoot is the kubelet's cgroup root as /proc/PID/cgroup shows
	// it ("/" when empty; kind's nodes: "/kubelet.slice"): pods are
	// recognised only under it, in the kubelet's layout (Layout).
	CgroupRoot string
	// Component names the agent in Events' source; "gpreemptd" when empty.
	Component string
	// Resync re-delivers every pod at this interval; 0 for never (the
	// watch alone keeps the cache current).
	Resync time.Duration
	Log    *slog.Logger
}

// Agent watches the pods of one node and answers the daemon's questions
// about processes on it. Create it with NewAgent, start it with Run.
type Agent struct {
	opts     Options
	log      *slog.Logger
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	events   record.EventBroadcaster
	recorder record.EventRecorder

	layout Layout

	mu        sync.Mutex
	policy    *Policy
	decisions map[types.UID]Decision
	// containers are each pod's container IDs as last seen: a change
	// (a container started) re-classes, as its processes are known to
	// be the pod's only once its status names them.
	containers map[types.UID]string
	pending    []pendingChange
	seq        uint64
	wake       chan struct{}
	changes    chan Change
}

const uidIndex = "cgroupUID"

// NewAgent returns an agent for opts.NodeName that talks to the API
// server through client.
func NewAgent(client kubernetes.Interface, opts Options) (*Agent, error) {
	if opts.NodeName == "" {
		return nil, errors.New("kube agent: no node name (set --node-name or NODE_NAME from the downward API)")
	}
	if opts.Policy == nil {
		opts.Policy = &Policy{}
	}
	if err := opts.Policy.Check(); err != nil {
		return nil, err
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Component == "" {
		opts.Component = "gpreemptd"
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		opts:       opts,
		log:        opts.Log.With("node", opts.NodeName),
		client:     client,
		layout:     Layout{Root: opts.CgroupRoot, NSDepth: NSDepthOf(opts.ProcRoot)},
		policy:     opts.Policy,
		decisions:  map[types.UID]Decision{},
		containers: map[types.UID]string{},
		wake:       make(chan struct{}, 1),
		changes:    make(chan Change),
	}
	a.factory = informers.NewSharedInformerFactoryWithOptions(client, opts.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
		}))
	a.informer = a.factory.Core().V1().Pods().Informer()
	// Pods are looked up by the UID their cgroup is named after: the API
	// UID, or a static pod's config hash.
	if err := a.informer.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		keys := []string{string(pod.UID)}
		if h := pod.Annotations[annotationMirror]; h != "" {
			keys = append(keys, h)
		}
		return keys, nil
	}}); err != nil {
		return nil, fmt.Errorf("kube agent: %w", err)
	}
	if err := a.informer.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("kube agent: %w", err)
	}
	if _, err := a.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.update(obj) },
		UpdateFunc: func(_, obj any) { a.update(obj) },
		DeleteFunc: a.remove,
	}); err != nil {
		return nil, fmt.Errorf("kube agent: %w", err)
	}
	a.events = record.NewBroadcaster(record.WithContext(context.Background()))
	a.recorder = a.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: opts.Component, Host: opts.NodeName})
	return a, nil
}

// Run watches the node's pods and delivers Changes until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer a.events.Shutdown()
	a.log.Info("watching pods", "fieldSelector", "spec.nodeName="+a.opts.NodeName)
	a.factory.Start(ctx.Done())
	defer a.factory.Shutdown()
	for {
		// A copy of the first change, taken under the lock: enqueue may
		// replace it while it is being sent.
		a.mu.Lock()
		var next pendingChange
		has := len(a.pending) > 0
		if has {
			next = a.pending[0]
		}
		a.mu.Unlock()
		if !has {
			select {
			case <-ctx.Done():
				return nil
			case <-a.wake:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case a.changes <- next.Change:
			a.mu.Lock()
			if len(a.pending) > 0 && a.pending[0].seq == next.seq {
				a.pending = a.pending[1:]
			} // else replaced meanwhile: the newer one is sent next
			a.mu.Unlock()
		case <-a.wake:
		}
	}
}

// pendingChange is a Change not yet delivered; seq tells a replaced one
// from the one sent.
type pendingChange struct {
	Change
	seq uint64
}

// WaitForSync waits until the first list of the node's pods is in the
// cache, so that ClassForPID knows every pod that existed at start.
func (a *Agent) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), a.informer.HasSynced) {
		return fmt.Errorf("kube agent: pods of node %s not synced: %w", a.opts.NodeName, context.Cause(ctx))
	}
	return nil
}

// Changes delivers each pod whose decision changed, in order, once Run
// runs. A pod changed several times before the daemon reads it is
// delivered once, with its latest decision.
func (a *Agent) Changes() <-chan Change { return a.changes }

// SetPolicy replaces the policy (on the daemon's reload) and re-decides
// every pod; pods whose decision changes are delivered on Changes.
func (a *Agent) SetPolicy(p *Policy) error {
	if p == nil {
		p = &Policy{}
	}
	if err := p.Check(); err != nil {
		return err
	}
	a.mu.Lock()
	a.policy = p
	a.mu.Unlock()
	for _, obj := range a.informer.GetStore().List() {
		a.update(obj)
	}
	return nil
}

func (a *Agent) update(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	d := a.policy.Decide(pod)
	old, had := a.decisions[pod.UID]
	ids := containerIDs(pod)
	if had && old.equal(d) && a.containers[pod.UID] == ids {
		a.mu.Unlock()
		return
	}
	a.decisions[pod.UID], a.containers[pod.UID] = d, ids
	ref := refOf(pod)
	a.enqueue(Change{Pod: ref, Decision: d})
	a.mu.Unlock()

	if had && old.equal(d) {
		return // a container started: its processes are re-classed
	}
	a.log.Info("pod class", "pod", ref.String(), "uid", ref.UID, "decision", d.String())
	if !had || !slicesEqual(old.Refused, d.Refused) {
		for _, why := range d.Refused {
			a.log.Warn("annotation refused", "pod", ref.String(), "reason", why)
			a.Event(ref, corev1.EventTypeWarning, ReasonClassRefused, why)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (a *Agent) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.decisions, pod.UID)
	delete(a.containers, pod.UID)
	a.enqueue(Change{Pod: refOf(pod), Deleted: true})
}

// enqueue adds c, replacing a pending change of the same pod. a.mu held.
func (a *Agent) enqueue(c Change) {
	a.seq++
	for i := range a.pending {
		if a.pending[i].Pod.UID == c.Pod.UID {
			a.pending[i] = pendingChange{c, a.seq}
			return
		}
	}
	a.pending = append(a.pending, pendingChange{c, a.seq})
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func refOf(pod *corev1.Pod) PodRef {
	return PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// Decision returns the current decision for a pod.
func (a *Agent) Decision(uid types.UID) (Decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.decisions[uid]
	return d, ok
}

// Event records an Event on the pod: eventType is corev1.EventTypeNormal
// or EventTypeWarning, reason one word in CamelCase (ReasonClassed), message
// for people ("classed be: 4 channel groups on GPU 0"). Recording is
// asynchronous and rate-limited per pod by client-go; it never blocks.
func (a *Agent) Event(ref PodRef, eventType, reason, message string) {
	a.recorder.Event(&corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID,
	}, eventType, reason, message)
}

// RESTConfig returns the client configuration: the kubeconfig file when
// one is named (or $KUBECONFIG is set), else the in-cluster service
// account.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (or pass --kubeconfig): %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Clean(kubeconfig))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// NodeName returns flag, else $NODE_NAME (the DaemonSet sets it from the
// downward API), else an error.
func NodeName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n, nil
	}
	return "", errors.New("no node name: pass --node-name or set NODE_NAME (the chart sets it from spec.nodeName)")
}

// Classify is the hook gpreemptd consults before its own policy rules.
// ok is false when the Kubernetes policy has nothing to say about pid (a
// host process, a pod not known on this node, a pod the policy names no
// class for, a process that exited): the daemon's rules then decide. rule
// names the decision for the daemon's status and logs, such as
// "kubernetes annotation inference/server".
func (a *Agent) Classify(pid int) (spec class.Spec, rule string, ok bool) {
	d, ref, err := a.ClassForPID(pid)
	if err != nil || !d.Managed() {
		return class.Spec{}, "", false
	}
	return d.Spec, fmt.Sprintf("kubernetes %s %s", d.Source, ref), true
}

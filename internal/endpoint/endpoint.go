// Package endpoint says what gpreemptd may scrape for an LC's latency:
// the metric names of each LLM server (presets), and the one address a
// scrape may connect to. It imports no other gpreempt package, so that the
// policy (a rule's latency field) and the Kubernetes agent (a pod's
// annotations) check what internal/scrape will fetch with the same rules.
package endpoint

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid marks an endpoint or metric that is refused.
var ErrInvalid = errors.New("invalid latency endpoint")

// Metric is one latency histogram of a server: the names it goes by, the
// first one exposed being used (a server renamed it across versions, and
// may export both for a while: summing them would count twice).
type Metric struct {
	Names []string
}

// Unit is what 1 means in the histogram named name: Prometheus's base unit
// (seconds), unless the name says milliseconds or microseconds (Triton's
// nv_inference_first_response_histogram_ms).
func Unit(name string) time.Duration {
	switch {
	case strings.HasSuffix(name, "_ms"), strings.Contains(name, "_ms_"), strings.HasSuffix(name, "_milliseconds"):
		return time.Millisecond
	case strings.HasSuffix(name, "_us"), strings.Contains(name, "_us_"), strings.HasSuffix(name, "_microseconds"):
		return time.Microsecond
	}
	return time.Second
}

// Metrics are the histograms an LC's latency is read from: end-to-end
// request latency, time to first token, time per output token (a server
// without one leaves it empty), and the label that names the model.
type Metrics struct {
	Request, TTFT, TPOT Metric
	// ModelLabel is the label a server names its model by, for Spec.Model.
	ModelLabel string
	// TPOTPerRequest: the TPOT histogram holds one value per request (its
	// mean), not one per token (TGI).
	TPOTPerRequest bool
}

// Preset is a server's metrics by name.
type Preset struct {
	Name string
	Metrics
	// Gaps says what the server does not export.
	Gaps string
}

// Presets are the servers whose metrics gpreemptd knows (docs/SLO.md,
// "Scraped latency", says where each name comes from).
var Presets = []Preset{
	{Name: "vllm", Metrics: Metrics{
		Request: Metric{[]string{"vllm:e2e_request_latency_seconds"}},
		TTFT:    Metric{[]string{"vllm:time_to_first_token_seconds"}},
		// vLLM renamed its per-token interval histogram; newer versions
		// keep the old name beside the new for a while.
		TPOT:       Metric{[]string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"}},
		ModelLabel: "model_name",
	}},
	{Name: "sglang", Metrics: Metrics{
		Request:    Metric{[]string{"sglang:e2e_request_latency_seconds"}},
		TTFT:       Metric{[]string{"sglang:time_to_first_token_seconds"}},
		TPOT:       Metric{[]string{"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"}},
		ModelLabel: "model_name",
	}},
	{Name: "tgi", Metrics: Metrics{
		Request:        Metric{[]string{"tgi_request_duration"}},
		TPOT:           Metric{[]string{"tgi_request_mean_time_per_token_duration"}},
		TPOTPerRequest: true,
	}, Gaps: "no time to first token; its time per token is each request's mean, prefill included"},
	{Name: "triton", Metrics: Metrics{
		TTFT:       Metric{[]string{"nv_inference_first_response_histogram_ms"}},
		ModelLabel: "model",
	}, Gaps: "request latency only as a cumulative counter and a sliding-window summary, no time per output token; the first-response histogram needs --metrics-config histogram_latencies=true and is each request's first response (a chunk, for a streaming model)"},
}

// PresetNames lists the presets' names.
func PresetNames() []string {
	out := make([]string, len(Presets))
	for i, p := range Presets {
		out[i] = p.Name
	}
	return out
}

// LookupPreset returns the preset called name.
func LookupPreset(name string) (Preset, error) {
	for _, p := range Presets {
		if p.Name == name {
			return p, nil
		}
	}
	return Preset{}, fmt.Errorf("%w: unknown preset %q (want one of %s)", ErrInvalid, name, strings.Join(PresetNames(), ", "))
}

// Spec is one LC's latency endpoint: where its metrics are and which.
type Spec struct {
	// Addr is the one address a scrape connects to: the URL's host,
	// checked again at dial time.
	Addr netip.AddrPort
	// Path is the request URI on it ("/metrics", with any query).
	Path string
	// Preset names the preset the metrics came from ("" for names given
	// one by one).
	Preset  string
	Metrics Metrics
	// Model keeps only the series whose model label is this ("": all,
	// summed).
	Model string
}

// URL is the address a scrape fetches.
func (s Spec) URL() string { return "http://" + s.Addr.String() + s.Path }

// Key names what a scrape of s reads, so that processes sharing an
// endpoint share its scrape.
func (s Spec) Key() string {
	m := s.Metrics
	return strings.Join([]string{s.URL(), s.Model, m.ModelLabel, strings.Join(m.Request.Names, ","),
		strings.Join(m.TTFT.Names, ","), strings.Join(m.TPOT.Names, ",")}, "|")
}

// String is the spec as status and logs show it.
func (s Spec) String() string {
	out := s.URL()
	if s.Preset != "" {
		out += " preset " + s.Preset
	}
	if s.Model != "" {
		out += " model " + s.Model
	}
	return out
}

// Check says whether s names at least one histogram, each a valid metric
// name.
func (m Metrics) Check() error {
	n := 0
	for _, mt := range []Metric{m.Request, m.TTFT, m.TPOT} {
		for _, name := range mt.Names {
			if !validMetricName(name) {
				return fmt.Errorf("%w: %q is not a metric name", ErrInvalid, name)
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%w: no metric named", ErrInvalid)
	}
	if m.ModelLabel != "" && !validLabelName(m.ModelLabel) {
		return fmt.Errorf("%w: %q is not a label name", ErrInvalid, m.ModelLabel)
	}
	return nil
}

// validMetricName is Prometheus's classic metric name rule
// ([a-zA-Z_:][a-zA-Z0-9_:]*).
func validMetricName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

func validLabelName(s string) bool { return !strings.Contains(s, ":") && validMetricName(s) }

// MaxPathLen bounds a metrics path.
const MaxPathLen = 256

// ParseLocal reads a rule's metrics URL, for a process on this host: http,
// a host that is an IP literal on loopback (or unspecified, which a server
// bound to every address also answers on loopback: the scrape goes to
// loopback), an explicit port or 80, no user information and no fragment.
// A host name is refused: what it resolves to is not the rule's to say.
func ParseLocal(raw string) (netip.AddrPort, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return netip.AddrPort{}, "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if u.Scheme != "http" {
		return netip.AddrPort{}, "", fmt.Errorf("%w: %q: want an http:// URL", ErrInvalid, raw)
	}
	if u.User != nil || u.Fragment != "" || u.Opaque != "" {
		return netip.AddrPort{}, "", fmt.Errorf("%w: %q: no user information, fragment or opaque part", ErrInvalid, raw)
	}
	host, port := u.Hostname(), u.Port()
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, "", fmt.Errorf("%w: %q: the host must be a loopback IP literal (127.0.0.1, [::1]), not %q", ErrInvalid, raw, host)
	}
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
	case ip.IsUnspecified():
		if ip.Is4() {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		} else {
			ip = netip.IPv6Loopback()
		}
	default:
		return netip.AddrPort{}, "", fmt.Errorf("%w: %q: the host must be on loopback (a process on this host); a pod's endpoint is named by its annotations", ErrInvalid, raw)
	}
	p := uint64(80)
	if port != "" {
		if p, err = strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return netip.AddrPort{}, "", fmt.Errorf("%w: %q: port %q", ErrInvalid, raw, port)
		}
	}
	path, err := checkPath(u.RequestURI())
	if err != nil {
		return netip.AddrPort{}, "", fmt.Errorf("%w: %q: %v", ErrInvalid, raw, err)
	}
	return netip.AddrPortFrom(ip, uint16(p)), path, nil
}

// ParsePath checks a path given on its own (a pod's annotation): absolute,
// printable, bounded.
func ParsePath(p string) (string, error) {
	if p == "" {
		return "/metrics", nil
	}
	u, err := url.ParseRequestURI(p)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return "", fmt.Errorf("%w: path %q: want an absolute path such as /metrics", ErrInvalid, p)
	}
	return checkPath(u.RequestURI())
}

func checkPath(p string) (string, error) {
	if len(p) > MaxPathLen {
		return "", fmt.Errorf("path longer than %d bytes", MaxPathLen)
	}
	if slices.ContainsFunc([]byte(p), func(c byte) bool { return c < 0x21 || c > 0x7e }) {
		return "", fmt.Errorf("path %q: not printable ASCII", p)
	}
	return p, nil
}

// ParsePort reads a port (1-65535).
func ParsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%w: port %q: want 1-65535", ErrInvalid, s)
	}
	return uint16(p), nil
}

// Pod is the spec of a pod's endpoint: its own address (from the pod's
// status, never from anything the pod names) and the port and path its
// annotations give.
func Pod(podIP string, port uint16, path string) (netip.AddrPort, string, error) {
	ip, err := netip.ParseAddr(podIP)
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, "", fmt.Errorf("%w: pod IP %q", ErrInvalid, podIP)
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() || ip.IsMulticast() {
		return netip.AddrPort{}, "", fmt.Errorf("%w: pod IP %s", ErrInvalid, ip)
	}
	p, err := ParsePath(path)
	if err != nil {
		return netip.AddrPort{}, "", err
	}
	return netip.AddrPortFrom(ip, port), p, nil
}

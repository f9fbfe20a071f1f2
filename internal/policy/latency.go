package policy

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/internal/endpoint"
)

// parseLatency reads a rule's latency endpoint: the metrics URL of a
// process on this host, and a preset or the histograms' names.
func parseLatency(n *yaml.Node, field string) (*endpoint.Spec, error) {
	fs, err := fields(n, field, "metrics", "preset", "model", "request", "ttft", "tpot")
	if err != nil {
		return nil, err
	}
	mn := fs["metrics"]
	if mn == nil {
		return nil, fieldErr(n, field, "metrics (the URL of the process's metrics, http://127.0.0.1:PORT/metrics) is required")
	}
	raw, err := scalar(mn, field+".metrics")
	if err != nil {
		return nil, err
	}
	spec := &endpoint.Spec{}
	if spec.Addr, spec.Path, err = endpoint.ParseLocal(strings.TrimSpace(raw)); err != nil {
		return nil, fieldErr(mn, field+".metrics", "%v", err)
	}
	named := false
	for _, k := range []string{"request", "ttft", "tpot"} {
		v := fs[k]
		if v == nil {
			continue
		}
		name, err := scalar(v, field+"."+k)
		if err != nil {
			return nil, err
		}
		m := &spec.Metrics.Request
		switch k {
		case "ttft":
			m = &spec.Metrics.TTFT
		case "tpot":
			m = &spec.Metrics.TPOT
		}
		m.Names, named = []string{strings.TrimSpace(name)}, true
		if err := (endpoint.Metrics{Request: *m}).Check(); err != nil {
			return nil, fieldErr(v, field+"."+k, "%v", err)
		}
	}
	pn := fs["preset"]
	switch {
	case pn != nil && named:
		return nil, fieldErr(pn, field+".preset", "a preset or the histograms' names (request, ttft, tpot), not both")
	case pn != nil:
		name, err := keyword(pn, field+".preset")
		if err != nil {
			return nil, err
		}
		p, err := endpoint.LookupPreset(name)
		if err != nil {
			return nil, fieldErr(pn, field+".preset", "%v", err)
		}
		spec.Preset, spec.Metrics = p.Name, p.Metrics
	case !named:
		return nil, fieldErr(n, field, "a preset (%s) or the histograms' names (request, ttft, tpot)", strings.Join(endpoint.PresetNames(), ", "))
	}
	if v := fs["model"]; v != nil {
		if spec.Model, err = scalar(v, field+".model"); err != nil {
			return nil, err
		}
		if spec.Metrics.ModelLabel == "" {
			if named {
				spec.Metrics.ModelLabel = "model_name"
			} else {
				return nil, fieldErr(v, field+".model", "preset %s names no model label: its server serves one model", spec.Preset)
			}
		}
	}
	return spec, nil
}

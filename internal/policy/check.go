package policy

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/class"
)

// checkSettings refuses a default or a rule whose class and weight give
// no settings. In SLO mode the BE timeslice moves up to the longest the
// mode may choose: a BE weight must fit that one too. def is the default's
// node (nil when the policy gives none).
func checkSettings(p *Policy, def *yaml.Node) error {
	classes := []class.Table{p.Classes}
	if _, ok := p.Classes[class.BE]; ok && p.SLO.Enabled {
		t := maps.Clone(p.Classes)
		be := t[class.BE]
		be.Timeslice = max(be.Timeslice, slices.Max(p.SLO.Rungs()), p.SLO.Safe, p.SLO.SharedFloor)
		t[class.BE] = be
		classes = append(classes, t)
	}
	for _, t := range classes {
		if !p.Default.Exempt {
			if _, err := t.Settings(p.Default.Spec.Name, p.Default.Spec.Weight); err != nil {
				return fmt.Errorf("line %d: default: %w%s", def.Line, err, sloNote(t, p))
			}
		}
		for _, r := range p.Rules {
			if !r.Decision.Exempt {
				if _, err := t.Settings(r.Decision.Spec.Name, r.Decision.Spec.Weight); err != nil {
					return fmt.Errorf("line %d: rules %q: %w%s", r.Line, r.Name, err, sloNote(t, p))
				}
			}
		}
	}
	return nil
}

// sloNote says, for an error under table t, that t has the longest BE
// timeslice SLO mode may choose rather than the policy's own.
func sloNote(t class.Table, p *Policy) string {
	if be := t[class.BE]; be.Timeslice != p.Classes[class.BE].Timeslice {
		return fmt.Sprintf(" (at the longest BE timeslice SLO mode may choose, %v)", be.Timeslice)
	}
	return ""
}

func validEnvName(s string) bool {
	if s == "" || strings.ContainsAny(s, "=\x00") {
		return false
	}
	return true
}

func checkGlobs(n *yaml.Node, field string, gs []string) error {
	for _, g := range gs {
		if _, err := path.Match(g, ""); err != nil {
			return fieldErr(n, field, "bad pattern %q: %v", g, err)
		}
	}
	return nil
}

// selfSetFields are the match fields a process sets for itself (its name, its
// executable through exec, its arguments and environment): a limit on
// them would let any process claim its rights.
var selfSetFields = []string{"comm", "exe", "cmdline", "env"}

// limitMatch refuses a request limit that matches on selfSet fields.
func limitMatch(n *yaml.Node, field string) error {
	if n.Kind != yaml.MappingNode {
		return nil // parseMatch says what is wrong
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; slices.Contains(selfSetFields, k.Value) {
			return fieldErr(k, join(field, k.Value), "a request limit cannot match on what the asking process sets itself (%s); match on uid, user, cgroup or gpu", strings.Join(selfSetFields, ", "))
		}
	}
	return nil
}

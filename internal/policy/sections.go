package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/tsg"
)

func parse(root *yaml.Node) (*Policy, error) {
	top, err := fields(root, "", "version", "classes", "default", "rules", "requests", "admin", "slo", "gate")
	if err != nil {
		return nil, err
	}
	p := &Policy{Classes: class.Defaults(), Default: Decision{Exempt: true, Rule: "default"},
		SLO:  SLO{Window: DefaultSLOWindow, PrepreemptBelow: DefaultPrepreemptBelow, SpinnerCeiling: DefaultSpinnerCeiling},
		Gate: DefaultGate()}
	if n := top["version"]; n != nil {
		v, err := scalar(n, "version")
		if err != nil {
			return nil, err
		}
		if v != "1" {
			return nil, fieldErr(n, "version", "%q: this gpreemptd reads version 1", v)
		}
	}
	if n := top["classes"]; n != nil {
		cs, err := fields(n, "classes", "lc", "burstable", "be")
		if err != nil {
			return nil, err
		}
		for _, name := range class.Names {
			cn := cs[string(name)]
			if cn == nil {
				continue
			}
			c, err := parseClass(cn, p.Classes[name], "classes."+string(name), &p.SLO)
			if err != nil {
				return nil, err
			}
			p.Classes[name] = c
		}
	}
	if n := top["default"]; n != nil {
		d, err := decision(n, "default")
		if err != nil {
			return nil, err
		}
		d.Rule = "default"
		p.Default = d
	}
	if n := top["rules"]; n != nil {
		if n.Kind != yaml.SequenceNode {
			return nil, fieldErr(n, "rules", "want a list of rules, got a %s", kindName(n.Kind))
		}
		names := map[string]int{}
		for i, rn := range n.Content {
			r, err := parseRule(rn, fmt.Sprintf("rules[%d]", i))
			if err != nil {
				return nil, err
			}
			if r.Name == "" {
				r.Name = fmt.Sprintf("rule-%d", i+1)
				r.Decision.Rule = r.Name
			}
			if prev, dup := names[r.Name]; dup {
				return nil, fieldErr(rn, fmt.Sprintf("rules[%d].name", i), "%q already names the rule at line %d", r.Name, prev)
			}
			names[r.Name] = r.Line
			p.Rules = append(p.Rules, r)
		}
	}
	if n := top["requests"]; n != nil {
		rq, err := parseRequests(n)
		if err != nil {
			return nil, err
		}
		p.Requests = rq
	}
	if n := top["admin"]; n != nil {
		a, err := parseAdmin(n)
		if err != nil {
			return nil, err
		}
		p.Admin = a
	}
	if n := top["gate"]; n != nil {
		if p.Gate, err = parseGate(n); err != nil {
			return nil, err
		}
	}
	if n := top["slo"]; n != nil {
		if err := parseSLO(n, &p.SLO); err != nil {
			return nil, err
		}
		if p.SLO.Enabled && p.SLO.LCObjective == nil && !slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Objective != nil }) {
			return nil, fieldErr(n, "slo.enabled", "no LC process has an objective: give classes.lc.objective or a rule's objective")
		}
	}
	if err := checkSettings(p, top["default"]); err != nil {
		return nil, err
	}
	return p, nil
}

// parseClass reads a class's settings, and its SLO fields (objective for
// lc, min_share for be) into s.
func parseClass(n *yaml.Node, c class.Class, field string, s *SLO) (class.Class, error) {
	allowed := []string{"timeslice", "interleave", "slice_overhead"}
	switch c.Name {
	case class.LC:
		allowed = append(allowed, "objective")
	case class.BE:
		allowed = append(allowed, "min_share")
	}
	fs, err := fields(n, field, allowed...)
	if err != nil {
		return c, err
	}
	if v := fs["objective"]; v != nil {
		o, err := objectives(v, field+".objective")
		if err != nil {
			return c, err
		}
		s.LCObjective = o
	}
	if v := fs["min_share"]; v != nil {
		str, err := scalar(v, field+".min_share")
		if err != nil {
			return c, err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return c, fieldErr(v, field+".min_share", "%q: want a fraction of BE alone's progress in [0, 1], such as 0.88", str)
		}
		s.MinBEShare = f
	}
	if v := fs["timeslice"]; v != nil {
		s, err := scalar(v, field+".timeslice")
		if err != nil {
			return c, err
		}
		if c.Timeslice, err = tsg.ParseTimeslice(s); err != nil {
			return c, fieldErr(v, field+".timeslice", "%v", err)
		}
	}
	if v := fs["interleave"]; v != nil {
		s, err := scalar(v, field+".interleave")
		if err != nil {
			return c, err
		}
		if c.Interleave, err = tsg.ParseLevel(s); err != nil {
			return c, fieldErr(v, field+".interleave", "%v", err)
		}
	}
	if v := fs["slice_overhead"]; v != nil {
		s, err := scalar(v, field+".slice_overhead")
		if err != nil {
			return c, err
		}
		if c.SliceOverhead, err = class.ParseSliceOverhead(s); err != nil {
			return c, fieldErr(v, field+".slice_overhead", "%v", err)
		}
	}
	if err := c.Check(); err != nil {
		return c, fieldErr(n, field, "%v", err)
	}
	return c, nil
}

// decision parses "be", "be:3" or "none".
func decision(n *yaml.Node, field string) (Decision, error) {
	s, err := scalar(n, field)
	if err != nil {
		return Decision{}, err
	}
	if strings.EqualFold(strings.TrimSpace(s), None) {
		return Decision{Exempt: true}, nil
	}
	sp, err := class.ParseSpec(s)
	if err != nil {
		return Decision{}, fieldErr(n, field, "%v (or none)", err)
	}
	return Decision{Spec: sp}, nil
}

func objectives(n *yaml.Node, field string) (objective.Objectives, error) {
	s, err := scalar(n, field)
	if err != nil {
		return nil, err
	}
	o, err := objective.ParseList(s)
	if err != nil {
		return nil, fieldErr(n, field, "%v", err)
	}
	return o, nil
}

func parseRule(n *yaml.Node, field string) (Rule, error) {
	fs, err := fields(n, field, "name", "match", "class", "class_from_env", "objective", "trust_self_set", "latency")
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Line: n.Line}
	if v := fs["name"]; v != nil {
		if r.Name, err = scalar(v, field+".name"); err != nil {
			return r, err
		}
	}
	if v := fs["match"]; v != nil {
		if r.Match, err = parseMatch(v, field+".match"); err != nil {
			return r, err
		}
	}
	cn, envn := fs["class"], fs["class_from_env"]
	if cn == nil && envn == nil {
		return r, fieldErr(n, field, "a rule needs class or class_from_env")
	}
	if cn != nil {
		if r.Decision, err = decision(cn, field+".class"); err != nil {
			return r, err
		}
	}
	if envn != nil {
		if r.ClassFromEnv, err = scalar(envn, field+".class_from_env"); err != nil {
			return r, err
		}
		if !validEnvName(r.ClassFromEnv) {
			return r, fieldErr(envn, field+".class_from_env", "%q is not a variable name", r.ClassFromEnv)
		}
		if r.EnvOnly = cn == nil; r.EnvOnly {
			r.Decision = Decision{Exempt: true}
		}
	}
	selfSet := r.Match.SelfSet()
	if v := fs["trust_self_set"]; v != nil {
		var trust bool
		if v.Kind != yaml.ScalarNode || v.Decode(&trust) != nil {
			return r, fieldErr(v, field+".trust_self_set", "%q: want true or false", v.Value)
		}
		if trust && len(selfSet) == 0 {
			return r, fieldErr(v, field+".trust_self_set", "the rule matches nothing the process sets itself (%s): nothing to trust", strings.Join(selfSetFields, ", "))
		}
		r.TrustSelfSet = trust
	}
	if cn != nil && r.Decision.Exempt && len(selfSet) > 0 && !r.TrustSelfSet {
		// A class is capped at the process's request limit; "leave it
		// alone" cannot be: any process could escape its class by
		// taking the rule's name.
		return r, fieldErr(cn, field+".class", "none on a match of what the process sets itself (%s): any process could leave itself at the driver's defaults; match on uid, user, cgroup or gpu too and set trust_self_set: true to mean it", strings.Join(selfSet, ", "))
	}
	if v := fs["objective"]; v != nil {
		o, err := objectives(v, field+".objective")
		if err != nil {
			return r, err
		}
		// A rule that takes the class from the environment may class lc
		// whatever its fallback class.
		if cn != nil && r.ClassFromEnv == "" && (r.Decision.Exempt || r.Decision.Spec.Name != class.LC) {
			return r, fieldErr(v, field+".objective", "only lc processes have a latency objective; this rule's class is %v", r.Decision)
		}
		r.Objective = o
	}
	if v := fs["latency"]; v != nil {
		if cn != nil && r.ClassFromEnv == "" && (r.Decision.Exempt || r.Decision.Spec.Name != class.LC) {
			return r, fieldErr(v, field+".latency", "only lc processes are measured; this rule's class is %v", r.Decision)
		}
		if r.Latency, err = parseLatency(v, field+".latency"); err != nil {
			return r, err
		}
	}
	r.Decision.Rule = r.Name
	return r, nil
}

// parseSLO reads the slo section into s.
func parseSLO(n *yaml.Node, s *SLO) error {
	fs, err := fields(n, "slo", "enabled", "window", "ladder", "safe", "shared_floor", "prepreempt_below", "spinner_ceiling", "calibrate", "pause_windows")
	if err != nil {
		return err
	}
	pause := true // a relative objective's default reference: the LC alone
	if v := fs["calibrate"]; v != nil {
		str, err := keyword(v, "slo.calibrate")
		if err != nil {
			return err
		}
		switch str {
		case "shortest":
			pause = false
		case "pause":
		default:
			return fieldErr(v, "slo.calibrate", "%q: want shortest (beside BE under the shortest timeslice) or pause (BE stopped)", v.Value)
		}
	}
	if v := fs["pause_windows"]; v != nil {
		str, err := scalar(v, "slo.pause_windows")
		if err != nil {
			return err
		}
		k, err := strconv.Atoi(strings.TrimSpace(str))
		if err != nil || k < 1 || k > 15 {
			return fieldErr(v, "slo.pause_windows", "%q: want a whole number of windows from 1 to 15", str)
		}
		if !pause {
			return fieldErr(v, "slo.pause_windows", "set with slo.calibrate: shortest")
		}
		s.PauseWindows = k
	} else if pause {
		s.PauseWindows = DefaultPauseWindows
	}
	if v := fs["enabled"]; v != nil {
		str, err := keyword(v, "slo.enabled")
		if err != nil {
			return err
		}
		switch str {
		case "true", "yes", "on":
			s.Enabled = true
		case "false", "no", "off":
			s.Enabled = false
		default:
			return fieldErr(v, "slo.enabled", "%q: want true or false", v.Value)
		}
	}
	if v := fs["window"]; v != nil {
		str, err := scalar(v, "slo.window")
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(strings.TrimSpace(str))
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return fieldErr(v, "slo.window", "%q: want a duration from 100ms to 1m, such as 1s", str)
		}
		s.Window = d
	}
	if v := fs["ladder"]; v != nil {
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return fieldErr(v, "slo.ladder", "want a list of BE timeslices, such as [1us, 200us, 1ms]")
		}
		for i, e := range v.Content {
			f := fmt.Sprintf("slo.ladder[%d]", i)
			d, err := timeslice(e, f)
			if err != nil {
				return err
			}
			if i > 0 && d <= s.Ladder[i-1] {
				return fieldErr(e, f, "%v does not exceed %v: the ladder must be strictly ascending", d, s.Ladder[i-1])
			}
			s.Ladder = append(s.Ladder, d)
		}
	}
	if v := fs["safe"]; v != nil {
		if s.Safe, err = timeslice(v, "slo.safe"); err != nil {
			return err
		}
	}
	if v := fs["shared_floor"]; v != nil {
		if s.SharedFloor, err = timeslice(v, "slo.shared_floor"); err != nil {
			return err
		}
	}
	if v := fs["prepreempt_below"]; v != nil {
		if s.PrepreemptBelow, err = timesliceOrOff(v, "slo.prepreempt_below"); err != nil {
			return err
		}
	}
	if v := fs["spinner_ceiling"]; v != nil {
		if s.SpinnerCeiling, err = timesliceOrOff(v, "slo.spinner_ceiling"); err != nil {
			return err
		}
	}
	return nil
}

func parseMatch(n *yaml.Node, field string) (Match, error) {
	var m Match
	fs, err := fields(n, field, "cgroup", "uid", "user", "comm", "exe", "cmdline", "env", "gpu")
	if err != nil {
		return m, err
	}
	for _, f := range []struct {
		name string
		dst  *[]string
	}{{"cgroup", &m.Cgroup}, {"user", &m.Users}, {"comm", &m.Comm}, {"exe", &m.Exe}, {"cmdline", &m.Cmdline}} {
		v := fs[f.name]
		if v == nil {
			continue
		}
		if *f.dst, err = strs(v, join(field, f.name)); err != nil {
			return m, err
		}
		if f.name != "user" {
			if err := checkGlobs(v, join(field, f.name), *f.dst); err != nil {
				return m, err
			}
		}
	}
	if v := fs["uid"]; v != nil {
		if m.UIDs, err = uids(v, join(field, "uid")); err != nil {
			return m, err
		}
	}
	if v := fs["env"]; v != nil {
		es, err := fields(v, join(field, "env"), anyKey(v)...)
		if err != nil {
			return m, err
		}
		m.Env = map[string]string{}
		for k, en := range es {
			f := join(join(field, "env"), k)
			if !validEnvName(k) {
				return m, fieldErr(en, f, "%q is not a variable name", k)
			}
			s, err := scalar(en, f)
			if err != nil {
				return m, err
			}
			if err := checkGlobs(en, f, []string{s}); err != nil {
				return m, err
			}
			m.Env[k] = s
		}
	}
	if v := fs["gpu"]; v != nil {
		gs, err := strs(v, join(field, "gpu"))
		if err != nil {
			return m, err
		}
		for _, g := range gs {
			ref, err := ParseGPURef(g)
			if err != nil {
				return m, fieldErr(v, join(field, "gpu"), "%v", err)
			}
			m.GPUs = append(m.GPUs, ref)
		}
	}
	return m, nil
}

func uids(n *yaml.Node, field string) ([]uint32, error) {
	ss, err := strs(n, field)
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, s := range ss {
		u, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return nil, fieldErr(n, field, "%q is not a numeric uid (names go under user)", s)
		}
		out = append(out, uint32(u))
	}
	return out, nil
}

func parseRequests(n *yaml.Node) (Requests, error) {
	var rq Requests
	fs, err := fields(n, "requests", "default_max", "limits", "changes_per_second", "burst")
	if err != nil {
		return rq, err
	}
	if v := fs["changes_per_second"]; v != nil {
		str, err := scalar(v, "requests.changes_per_second")
		if err != nil {
			return rq, err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || !(f >= 0.01 && f <= 1000) {
			return rq, fieldErr(v, "requests.changes_per_second", "%q: want class changes a second per uid, from 0.01 to 1000", str)
		}
		rq.ChangesPerSecond = f
	}
	if v := fs["burst"]; v != nil {
		str, err := scalar(v, "requests.burst")
		if err != nil {
			return rq, err
		}
		k, err := strconv.Atoi(strings.TrimSpace(str))
		if err != nil || k < 1 || k > 1000 {
			return rq, fieldErr(v, "requests.burst", "%q: want a whole number of class changes from 1 to 1000", str)
		}
		rq.Burst = k
	}
	if v := fs["default_max"]; v != nil {
		if rq.DefaultMax, err = maxClass(v, "requests.default_max"); err != nil {
			return rq, err
		}
	}
	if v := fs["limits"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			return rq, fieldErr(v, "requests.limits", "want a list, got a %s", kindName(v.Kind))
		}
		for i, ln := range v.Content {
			f := fmt.Sprintf("requests.limits[%d]", i)
			lf, err := fields(ln, f, "match", "max")
			if err != nil {
				return rq, err
			}
			l := Limit{Line: ln.Line}
			if mn := lf["match"]; mn != nil {
				if err := limitMatch(mn, f+".match"); err != nil {
					return rq, err
				}
				if l.Match, err = parseMatch(mn, f+".match"); err != nil {
					return rq, err
				}
			}
			mx := lf["max"]
			if mx == nil {
				return rq, fieldErr(ln, f, "a limit needs max")
			}
			if l.Max, err = maxClass(mx, f+".max"); err != nil {
				return rq, err
			}
			rq.Limits = append(rq.Limits, l)
		}
	}
	return rq, nil
}

// maxClass parses a class name or "none" (nothing may be asked for: "").
func maxClass(n *yaml.Node, field string) (class.Name, error) {
	s, err := scalar(n, field)
	if err != nil {
		return "", err
	}
	if strings.EqualFold(strings.TrimSpace(s), None) {
		return "", nil
	}
	c, err := class.ParseName(s)
	if err != nil {
		return "", fieldErr(n, field, "%v (or none)", err)
	}
	return c, nil
}

func parseAdmin(n *yaml.Node) (Admin, error) {
	var a Admin
	fs, err := fields(n, "admin", "uid", "group")
	if err != nil {
		return a, err
	}
	if v := fs["uid"]; v != nil {
		if a.UIDs, err = uids(v, "admin.uid"); err != nil {
			return a, err
		}
	}
	if v := fs["group"]; v != nil {
		if a.Groups, err = strs(v, "admin.group"); err != nil {
			return a, err
		}
	}
	return a, nil
}

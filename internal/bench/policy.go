package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
)

// With --daemon-policy NAME=FILE, gpreemptd runs each scenario under the
// policy it is given: before the scenario's workers start, the bench
// writes FILE over the daemon's policy (--daemon-config, the file gpreemptd
// was started with) and asks it to reload. Settings that need different
// daemon policies (the daemon's gate on; SLO mode with a relative
// objective; with an absolute one) then run side by side in one run,
// their repetitions interleaved. A scenario not named takes the policy
// named "default", if any.

// defaultPolicy names the policy of the scenarios not named.
const defaultPolicy = "default"

// tagSep starts a scenario's tag: "slo:llm-defaults#abs" runs
// slo:llm-defaults under a name of its own (its own daemon policy).
const tagSep = "#"

var tagRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// aloneRE is the placeholder of an objective relative to the LC's alone
// p50 of this run: "@ALONE_P50*1.15@" becomes 1.15 times the p50 of the
// last standalone run of the scenario's baseline, as "812345us".
var aloneRE = regexp.MustCompile(`@ALONE_P50(?:\*([0-9]+(?:\.[0-9]+)?))?@`)

// ownRE is the placeholder of an objective relative to the scenario's own
// LC process alone: "@OWN_P50*1.15@" becomes 1.15 times the p50 of the
// --own-alone requests its LC ran in BE's idle halves before its lead-in.
// An eager LC's alone latency moves 20-80% between processes, so a
// standalone run's p50 can lie under what this process runs alone.
var ownRE = regexp.MustCompile(`@OWN_P50(?:\*([0-9]+(?:\.[0-9]+)?))?@`)

// ownProvisional fills @OWN_P50@ until the LC's own requests alone are in
// (where no --own-alone-policy is given): an objective every arm meets, so
// SLO mode never takes the gate, whose launch probes would slow the LC in
// BE's idle halves.
const ownProvisional = time.Hour

// parsePolicies reads --daemon-policy's NAME=FILE entries, and names the
// scenarios whose policy wants their own LC's alone p50 (@OWN_P50@).
func parsePolicies(entries []string, scs []Scenario) (files map[string]string, own map[string]bool, err error) {
	if len(entries) == 0 {
		return nil, nil, nil
	}
	files, texts := map[string]string{}, map[string]string{}
	for _, e := range entries {
		name, file, ok := strings.Cut(e, "=")
		if !ok || name == "" || file == "" {
			return nil, nil, fmt.Errorf("%w: --daemon-policy %q: want SCENARIO=FILE (or default=FILE)", ErrInvalidArgument, e)
		}
		if name != defaultPolicy && !scenarioListed(scs, name) {
			return nil, nil, fmt.Errorf("%w: --daemon-policy %q: no scenario %s in --scenarios", ErrInvalidArgument, e, name)
		}
		if _, dup := files[name]; dup {
			return nil, nil, fmt.Errorf("%w: --daemon-policy: %s given twice", ErrInvalidArgument, name)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --daemon-policy %s: %w", ErrInvalidArgument, name, err)
		}
		files[name], texts[name] = file, string(b)
	}
	for _, sc := range scs {
		if text := policyIn(texts, sc); !sc.HasLC() || !ownRE.MatchString(text) { // without an LC the placeholder stays provisional: nothing to judge
			continue
		}
		if !sc.Runtime.LLM() || sc.LCCount() != 1 { // only lc_decode.py runs requests alone on its own
			return nil, nil, fmt.Errorf("%w: --daemon-policy: %s's policy wants @OWN_P50@, which only an llm-* scenario of one LC measures", ErrInvalidArgument, sc.Name)
		}
		if own == nil {
			own = map[string]bool{}
		}
		own[sc.Name] = true
	}
	return files, own, nil
}

// checkOwnAlone checks the policy gpreemptd runs while an @OWN_P50@ scenario's LC runs alone
// (one for every such scenario). A scenario whose own policy turns SLO mode on needs one (under
// its own, the placeholder an hour, SLO mode would explore to its longest arm meanwhile and start
// the objective from there), and it must keep the scenario's SLO mode and window: turned off,
// gpreemptd forgets BE's rate alone, which it cannot learn again beside the LC.
func (o *runOptions) checkOwnAlone() error {
	var alone *policy.Policy
	if o.OwnAlonePolicy != "" {
		var err error
		if alone, err = parsePolicyFile(o.OwnAlonePolicy); err != nil {
			return fmt.Errorf("%w: --own-alone-policy: %w", ErrInvalidArgument, err)
		}
	}
	for _, sc := range o.Scenarios {
		if !o.ownAlone[sc.Name] {
			continue
		}
		own, err := parsePolicyFile(o.policyFor(sc))
		switch {
		case err != nil:
			return fmt.Errorf("%w: --daemon-policy %s: %w", ErrInvalidArgument, sc.Name, err)
		case alone == nil && own.SLO.Enabled:
			return fmt.Errorf("%w: %s's policy names @OWN_P50@ with SLO mode on: give --own-alone-policy, SLO mode held at one arm while its LC runs alone", ErrInvalidArgument, sc.Name)
		case alone != nil && (alone.SLO.Enabled != own.SLO.Enabled || alone.SLO.Window != own.SLO.Window):
			return fmt.Errorf("%w: --own-alone-policy: SLO mode %v, window %v, where %s's policy has %v, %v: gpreemptd would forget BE's rate alone or window it otherwise",
				ErrInvalidArgument, alone.SLO.Enabled, alone.SLO.Window, sc.Name, own.SLO.Enabled, own.SLO.Window)
		}
	}
	return nil
}

// parsePolicyFile parses a --daemon-policy file as gpreemptd would, its placeholders filled as
// from a p50 of a second (a factor that leaves an objective at nothing is refused here, not after
// the LC has run alone).
func parsePolicyFile(file string) (*policy.Policy, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	second := float64(time.Second.Microseconds())
	return policy.Parse([]byte(expandP50(expandP50(string(b), ownRE, second), aloneRE, second)))
}

func scenarioListed(scs []Scenario, name string) bool {
	for _, sc := range scs {
		if sc.Name == name {
			return true
		}
	}
	return false
}

// policyFor is the policy file sc runs under ("": the daemon's own).
func (o *runOptions) policyFor(sc Scenario) string { return policyIn(o.DaemonPolicies, sc) }

// policyIn is sc's entry of a --daemon-policy map (by scenario), else its default.
func policyIn(m map[string]string, sc Scenario) string {
	if v, ok := m[sc.Name]; ok {
		return v
	}
	return m[defaultPolicy]
}

// expandAlone replaces the @ALONE_P50[*F]@ placeholders of a policy with
// F times the p50 of the last standalone run of sc's baseline among runs,
// and @OWN_P50[*F]@ with F times own (µs; ownProvisional where 0); an
// error if an @ALONE_P50@ has no such run.
func expandAlone(text string, sc Scenario, runs []*ScenarioResult, own float64) (string, error) {
	if own > 0 {
		text = expandP50(text, ownRE, own)
	} else {
		text = ownRE.ReplaceAllString(text, fmt.Sprintf("%dus", ownProvisional.Microseconds()))
	}
	if !aloneRE.MatchString(text) {
		return text, nil
	}
	standalone, _ := baselineNames(sc)
	var p50 float64
	for _, sr := range runs {
		if sr.Name == standalone && sr.Error == "" && sr.LCLatencyUs != nil {
			p50 = sr.LCLatencyUs.P50
		}
	}
	if p50 <= 0 {
		return "", fmt.Errorf("%w: %s's daemon policy wants @ALONE_P50@, but no %s run measured before it: list %s first", ErrInvalidArgument, sc.Name, standalone, standalone)
	}
	return expandP50(text, aloneRE, p50), nil
}

// expandP50 replaces re's placeholders in text with F times p50 (µs).
func expandP50(text string, re *regexp.Regexp, p50 float64) string {
	return re.ReplaceAllStringFunc(text, func(m string) string {
		f := 1.0
		if sub := re.FindStringSubmatch(m); sub[1] != "" {
			f, _ = strconv.ParseFloat(sub[1], 64)
		}
		return fmt.Sprintf("%dus", int64(math.Round(p50*f)))
	})
}

// applyPolicy puts gpreemptd under sc's policy (--daemon-policy) unless it runs under it already
// (own: @OWN_P50@'s p50; until it is in, --own-alone-policy where given), writes the text in
// force (placeholders expanded) to dir ("": nowhere) as policy.yaml, or policy-alone.yaml until
// the LC's alone is in, and returns sc's own policy file.
func (r *runner) applyPolicy(ctx context.Context, sc Scenario, runs []*ScenarioResult, own float64, dir string) (string, error) {
	file := r.o.policyFor(sc)
	if file == "" {
		return "", nil
	}
	src, copyTo := file, "policy.yaml"
	if r.o.ownAlone[sc.Name] && own <= 0 { // until the LC's own requests alone are in
		copyTo = "policy-alone.yaml"
		if r.o.OwnAlonePolicy != "" {
			src = r.o.OwnAlonePolicy
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("daemon policy for %s: %w", sc.Name, err)
	}
	text, err := expandAlone(string(b), sc, runs, own)
	if err != nil {
		return "", err
	}
	if text != r.policyText {
		tmp := filepath.Join(filepath.Dir(r.o.DaemonConfig), ".gpreempt-bench-policy.tmp")
		if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
			return "", fmt.Errorf("daemon policy for %s: %w", sc.Name, err)
		}
		if err := os.Rename(tmp, r.o.DaemonConfig); err != nil {
			return "", fmt.Errorf("daemon policy for %s: %w", sc.Name, err)
		}
		if err := r.reload(ctx); err != nil {
			return "", fmt.Errorf("gpreemptd reload for %s (policy %s): %w", sc.Name, src, err)
		}
		r.policyText = text
		r.log.Info("gpreemptd policy", "scenario", sc.Name, "file", src)
	}
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, copyTo), []byte(text), 0o644); err != nil {
			r.log.Warn("policy copy", "err", err)
		}
	}
	return file, nil
}

// reloadDaemon is POST /v1/reload on the daemon's socket.
func reloadDaemon(socket string) func(context.Context) error {
	return func(ctx context.Context) error { return api.New(socket).Reload(ctx) }
}

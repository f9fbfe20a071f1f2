package policy

import (
	"strings"
	"testing"
)

// A rule that matches what a process sets itself warns where its class is above every request
// limit (each process it matches gets the limit instead), and only there.
func TestWarnings(t *testing.T) {
	const lc = "classes: {lc: {timeslice: 5s}}\n"
	for _, tt := range []struct {
		name, yaml string
		want       string // a part of the one warning; "" for none
	}{
		{"env rule, no request limit", lc + "rules: [{name: lc, match: {env: {GPREEMPT_CLASS: lc}}, class: lc}]\n", `line 2: rule "lc" matches what a process sets itself (env), so its class lc is capped at the request limit (requests.default_max: none, be:1)`},
		{"comm rule over default_max be", lc + "rules: [{name: srv, match: {comm: [server]}, class: lc}]\nrequests: {default_max: be}\n", `rule "srv" matches what a process sets itself (comm), so its class lc is capped at the request limit (requests.default_max: be)`},
		{"default_max lc", lc + "rules: [{name: lc, match: {env: {GPREEMPT_CLASS: lc}}, class: lc}]\nrequests: {default_max: lc}\n", ""},
		{"a limit that allows lc", lc + "rules: [{name: lc, match: {env: {GPREEMPT_CLASS: lc}}, class: lc}]\nrequests: {limits: [{match: {uid: [1000]}, max: lc}]}\n", ""},
		{"trust_self_set", lc + "rules: [{name: lc, match: {env: {GPREEMPT_CLASS: lc}}, class: lc, trust_self_set: true}]\n", ""},
		{"a uid rule", lc + "rules: [{name: lc, match: {uid: [1000]}, class: lc}]\n", ""},
		{"be under no limit: be:1 already the least", "rules: [{name: b, match: {comm: [train]}, class: be}]\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			w := p.Warnings()
			if tt.want == "" && len(w) > 0 || tt.want != "" && (len(w) != 1 || !strings.Contains(w[0], tt.want)) {
				t.Errorf("warnings %q, want one with %q (none: %v)", w, tt.want, tt.want == "")
			}
		})
	}
}

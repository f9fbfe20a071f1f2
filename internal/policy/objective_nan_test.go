package policy

import "testing"

// TestNaNObjectiveRefused: "nan" parses as a float, and an objective
// built on it would never count its LC; the policy is refused.
func TestNaNObjectiveRefused(t *testing.T) {
	for _, o := range []string{"p50<=nanx", "pnan<=1.05x", "pNaN<=2ms"} {
		if _, err := Parse([]byte("classes:\n  lc: {objective: \"" + o + "\"}\nslo: {enabled: true}\n")); err == nil {
			t.Errorf("objective %q accepted", o)
		}
	}
}

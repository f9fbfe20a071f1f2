package slo

import (
	"regexp"
	"strconv"
	"testing"
)

// TestExplorationEndNamesBothArms: an exploration that ends with its arm known to meet says what the arm it came from
// does and gives BE, and the arm settled on is the one those words make the better (the origin where it meets with BE
// as much or more, and not under BE's minimum). It fails with the origin left out of the words.
func TestExplorationEndNamesBothArms(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	end := regexp.MustCompile(`^\S+ meets every objective with `)
	re := regexp.MustCompile(`^(\S+) meets every objective with (?:BE at ([0-9.]+)%|more BE share expected); (\S+) (meets|might meet|misses) them with (?:BE at ([0-9.]+)%|more BE share expected)(, under BE's minimum)?$`)
	checked := 0
	for _, w := range []Workload{steadyLLM, slowLLM, hostModesLLM, EagerPyTorchH100} {
		for seed := uint64(1); seed <= 8; seed++ {
			for _, d := range play(newController(t, Options{}), NewSimGPU(seed), w, obj, 600, dutyIdle) {
				if d.Cause != CauseWithin || !end.MatchString(d.Reason) {
					continue
				}
				m := re.FindStringSubmatch(d.Reason)
				if m == nil {
					t.Fatalf("%s seed %d: %q, want the arm it came from named with its verdict and BE", w.Name, seed, d.Reason)
				}
				if m[2] == "" || m[5] == "" || m[2] == m[5] {
					continue // a share not yet known, or one the words cannot order
				}
				explored, _ := strconv.ParseFloat(m[2], 64)
				origin, _ := strconv.ParseFloat(m[5], 64)
				if want := map[bool]string{true: m[3], false: m[1]}[m[4] == "meets" && m[6] == "" && origin > explored]; d.Arm.String() != want {
					t.Errorf("%s seed %d: %q settled on %v, want %s", w.Name, seed, d.Reason, d.Arm, want)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Fatal("no exploration ended with its arm known to meet and both arms' BE known")
	}
}

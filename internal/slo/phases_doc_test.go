package slo

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// documentedTransitions reads docs/SLO.md's table of phases and transitions: for each row, the
// phases it starts from (column one: names, "any", "any but NAME") and those it goes to (column
// three: names, "(same)" the phase it starts from).
func documentedTransitions(t *testing.T) map[[2]string]bool {
	b, err := os.ReadFile("../../docs/SLO.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "### Phases and transitions\n")
	_, table, ok := strings.Cut(section, "\n| phase | on | to | arm |\n")
	if !ok {
		t.Fatal("docs/SLO.md: no table \"| phase | on | to | arm |\" under \"### Phases and transitions\"")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	var all []string
	for k := range Recovering + 1 {
		all = append(all, k.String())
	}
	named := func(cell string) (out []string) {
		for _, p := range all {
			if strings.Contains(cell, p) {
				out = append(out, p)
			}
		}
		return out
	}
	pairs := map[[2]string]bool{}
	for _, row := range strings.Split(table, "\n")[1:] { // past the header's rule
		cells := strings.Split(strings.Trim(row, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("docs/SLO.md: a row of the transition table without its four cells: %q", row)
		}
		from, to := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[2])
		froms := named(from)
		if but, ok := strings.CutPrefix(from, "any"); ok {
			froms = slices.DeleteFunc(slices.Clone(all), func(p string) bool { return slices.Contains(named(but), p) })
		}
		for _, f := range froms {
			tos := named(to)
			if to == "(same)" {
				tos = []string{f}
			}
			for _, x := range tos {
				pairs[[2]string{f, x}] = true
			}
		}
	}
	for _, p := range all {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(pairs)), func(k [2]string) bool { return k[0] == p }) {
			t.Fatalf("docs/SLO.md's transition table: no row from %s", p)
		}
	}
	return pairs
}

// TestPhasesAsDocumented: every phase change the simulator shows, from the converged runs, a
// search that calibrates by pausing BE and one whose LC goes silent, is a row of docs/SLO.md's
// transition table, and every phase is seen.
func TestPhasesAsDocumented(t *testing.T) {
	doc := documentedTransitions(t)
	runs := convergedRuns(t)
	runs["calibrating, the LC silent a while"] = func(seed uint64) []Decision {
		g := NewSimGPU(seed)
		return play(newController(t, Options{}), g, slowLLM, mustObjective(t, "p50<=1.10x"), 1200, func(i int, g *SimGPU) { g.Missing = i >= 600 && i < 620 })
	}
	seen, observed := map[string]bool{}, map[[2]string]bool{}
	for name, run := range runs {
		for seed := uint64(1); seed <= 4; seed++ {
			prev := Settled.String() // a controller's phase as New leaves it
			for i, d := range run(seed) {
				seen[d.Phase] = true
				if d.Phase == prev {
					continue
				}
				if observed[[2]string{prev, d.Phase}] = true; !doc[[2]string{prev, d.Phase}] {
					t.Errorf("%s, seed %d, window %d: %s to %s (%s: %s), not in docs/SLO.md's table", name, seed, i, prev, d.Phase, d.Cause, d.Reason)
				}
				prev = d.Phase
			}
		}
	}
	for k := range Recovering + 1 {
		if !seen[k.String()] {
			t.Errorf("phase %s never seen: the check is not made on it", k)
		}
	}
	t.Logf("phase changes documented %d, seen %d: %v", len(doc), len(observed), observed)
}

package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Results in the schema gpreempt-bench wrote before repetitions existed: a
// pre-preemption matrix with two hint launchers, each scenario's LC samples
// thinned to every 40th by latency rank so that its quantiles stay the run's.
var oldResults = []string{
	filepath.Join("testdata", "schema1-prepreempt-poller.json"),
	filepath.Join("testdata", "schema1-prepreempt-goroutine.json"),
}

func TestLoadOldResults(t *testing.T) {
	res, err := LoadResults(oldResults[0])
	if err != nil {
		t.Fatal(err)
	}
	if res.Schema != 1 || len(res.Summaries) != 4 || res.Config.Period.String() != "3.5ms" || res.Config.Prep.String() != "500us" {
		t.Fatalf("schema %d, %d summaries, period %v, prep %v", res.Schema, len(res.Summaries), res.Config.Period, res.Config.Prep)
	}
	s := res.Summaries[2]
	if s.Name != "prepreempt-be-1us" || s.Reps != 1 || s.P99 == nil || s.P99.CI95 == nil {
		t.Fatalf("summary %+v", s)
	}
	// The file's own ratio (that single run measured p50 1.01x, p99 0.99x) is
	// what the summary reads as the one repetition's.
	if s.P50.Median < 1.0 || s.P50.Median > 1.02 || s.P99.Median < 0.98 || s.P99.Median > 1.0 {
		t.Errorf("ratios p50 %.3f p99 %.3f, want the file's 1.01 / 0.99", s.P50.Median, s.P99.Median)
	}
	if !s.P50.CI95.Contains(s.P50.Pooled) {
		t.Errorf("p50 %v outside its CI %v", s.P50.Pooled, s.P50.CI95)
	}
}

func TestCompareOldAndNew(t *testing.T) {
	a, err := LoadResults(oldResults[0])
	if err != nil {
		t.Fatal(err)
	}
	// B: the new format, as a --repeat run writes it, from the other old
	// file.
	old, err := LoadResults(oldResults[1])
	if err != nil {
		t.Fatal(err)
	}
	old.Schema = ResultsSchemaVersion
	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, nil, old); err != nil {
		t.Fatal(err)
	}
	b, err := LoadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	cmp, err := Compare(a, b, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Rows) != 4 || len(cmp.Notes) != 0 {
		t.Fatalf("%d rows, notes %q", len(cmp.Rows), cmp.Notes)
	}
	var out bytes.Buffer
	if err := cmp.WriteMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| prepreempt-be-1us | 1 / 1 |", "| be-1us |", "| be-only |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCompareRefuses(t *testing.T) {
	base := repeatFixture()
	clone := func(edit func(*Results)) *Results {
		b, err := json.Marshal(base)
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeResults(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		edit(r)
		return r
	}
	tests := []struct {
		name string
		edit func(*Results)
		want string
	}{
		{"other GPU", func(r *Results) { r.Device.Name = "NVIDIA A100" }, `device "NVIDIA H100 80GB HBM3" against "NVIDIA A100"`},
		{"other period", func(r *Results) { r.Config.Period *= 2 }, "LC period 3.5ms against 7ms"},
		{"other preparation", func(r *Results) { r.Config.Prep = PrepDist{} }, "LC preparation 500us against 0"},
		{"nothing in common", func(r *Results) {
			for _, s := range r.Summaries {
				s.Name += "-other"
			}
		}, "no scenario in common"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compare(base, clone(tt.edit), false)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tt.want) || ExitCode(err) != ExitMismatch {
				t.Fatalf("Compare = %v, want ErrMismatch containing %q", err, tt.want)
			}
		})
	}
	cmp, err := Compare(base, clone(tests[0].edit), true)
	if err != nil || len(cmp.Notes) != 1 || !strings.Contains(cmp.Notes[0], "mismatch: device") {
		t.Fatalf("--allow-mismatch: %v, notes %q", err, cmp.Notes)
	}
}

func TestCompareVerdicts(t *testing.T) {
	a := repeatFixture()
	b := repeatFixture()
	// B's be-1us twice as fast, with its interval moved along.
	for _, s := range b.Summaries {
		if s.Name == "be-1us" {
			s.P50.Median /= 2
			s.P50.CI95.Lo /= 2
			s.P50.CI95.Hi /= 2
		}
	}
	cmp, err := Compare(a, b, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range cmp.Rows {
		got[r.Scenario] = strings.Join(r.Verdict, ", ")
	}
	if got["be-1us"] != "p50 lower in B" || got["prepreempt-be-1us"] != "" {
		t.Errorf("verdicts %q", got)
	}
}

func TestCompareCLI(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := writeJSON(good, nil, repeatFixture()); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	b, _ := os.ReadFile(good)
	zw.Write(b)
	zw.Close()
	goodGz := write("good.json.gz", gz.String())
	tests := []struct {
		args     []string
		wantExit int
		wantText string
	}{
		{[]string{good, goodGz}, ExitOK, "| be-1us | 3 / 3 |"},
		{[]string{"-o", "json", good, oldResults[0]}, ExitOK, `"multi-tenant: only in A"`},
		{[]string{good}, ExitUsage, "two results files"},
		{[]string{"-o", "yaml", good, good}, ExitUsage, `-o "yaml"`},
		{[]string{good, filepath.Join(dir, "missing.json")}, ExitBadResults, "missing.json"},
		{[]string{good, write("trunc.json", `{"schema": 2, "tool": "gpreempt-bench", "scenarios": [`)}, ExitBadResults, "not JSON"},
		{[]string{good, write("worker.json", `{"schema": 1, "worker": "gpreempt-bench lc"}`)}, ExitBadResults, "is this a worker's file"},
		{[]string{good, write("future.json", `{"schema": 9, "tool": "gpreempt-bench"}`)}, ExitBadResults, "schema 9"},
		{[]string{good, write("empty.json", `{"schema": 2, "tool": "gpreempt-bench", "scenarios": []}`)}, ExitBadResults, "no scenario runs"},
		{[]string{good, write("badcfg.json", `{"schema": 2, "tool": "gpreempt-bench", "config": {"period": "fast"}, "scenarios": [{"name": "standalone"}]}`)}, ExitBadResults, "config period"},
		{[]string{good, write("badsc.json", `{"schema": 2, "tool": "gpreempt-bench", "config": {"scenarios": ["warp-drive"]}, "scenarios": [{"name": "standalone"}]}`)}, ExitBadResults, "warp-drive"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			app := NewApp()
			var out bytes.Buffer
			app.Writer, app.ErrWriter = &out, &out
			err := app.Run(append([]string{"gpreempt-bench", "compare"}, tt.args...))
			text := out.String()
			if err != nil {
				text = err.Error()
			}
			if ExitCode(err) != tt.wantExit || !strings.Contains(text, tt.wantText) {
				t.Fatalf("exit %d, %q; want exit %d containing %q", ExitCode(err), text, tt.wantExit, tt.wantText)
			}
		})
	}
}

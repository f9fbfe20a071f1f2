package probe

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

// TestScrapeSpreadTurnsLoneValues: an LC of one request a second (200 ms ± 10%, 1.07x while BE works the even 4 s
// halves) seen through 5% buckets, a value a window: placed at its bucket's middle, every measurement's p50 is a
// bucket's middle (within half a bucket of the app's) and its ratio a power of 1.05 (a handful of distinct ratios);
// turned each window, the values spread through their buckets and the ratios are as many as the measurements.
func TestScrapeSpreadTurnsLoneValues(t *testing.T) {
	var samples []sample
	for j := range 480 {
		at := int64(8e9) + int64(j)*1e9 + 3e8
		lat := 200e6 * (0.9 + 0.2*math.Mod(float64(j)*math.Sqrt2, 1))
		if (at/4e9)%2 == 0 {
			lat *= 1.07
		}
		samples = append(samples, sample{Arrival: at, Latency: int64(lat)})
	}
	path := writeResults(t, map[string]any{"scenarios": []any{map[string]any{"name": "slo:test", "be_duty": 8e9,
		"lc": map[string]any{"samples": samples}}}})
	out := runScript(t, "scrape_spread.py", path)
	n := regexp.MustCompile(`(?m)^(\d+) measurements`).FindSubmatch(out)
	row := func(name string) (p50Max, ratioMax float64, distinct int) {
		m := regexp.MustCompile(`(?m)^\| ` + name + ` \|(?: [^|]+ \|){3} ([0-9.]+)% \|(?: [^|]+ \|){3} ([0-9.]+)% \| (\d+) \|$`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no %s row:\n%s", name, out)
		}
		p50Max, _ = strconv.ParseFloat(string(m[1]), 64)
		ratioMax, _ = strconv.ParseFloat(string(m[2]), 64)
		distinct, _ = strconv.Atoi(string(m[3]))
		return p50Max, ratioMax, distinct
	}
	if n == nil {
		t.Fatalf("no measurement count:\n%s", out)
	}
	ms, _ := strconv.Atoi(string(n[1]))
	midP50, midRatio, midDistinct := row("middle")
	_, _, rotDistinct := row("rotated")
	// at the middle a p50 is within half a bucket of the app's, a ratio within a bucket
	if ms < 10 || midDistinct > 4 || midP50 > 2.5 || midRatio > 5.1 || rotDistinct < ms/2 {
		t.Errorf("%d measurements: middle %d distinct ratios (want <= 4), p50 and ratio off the app's by at most %.2f%% and %.2f%% (want <= 2.5 and 5.1); rotated %d distinct (want >= %d):\n%s",
			ms, midDistinct, midP50, midRatio, rotDistinct, ms/2, out)
	}
}

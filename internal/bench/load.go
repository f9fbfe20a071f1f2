package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrBadResults marks a results file that cannot be read: not JSON, not
// gpreempt-bench's, a schema this binary does not know, or inconsistent.
var ErrBadResults = errors.New("unusable results file")

// maxResultsBytes bounds a decompressed results file (a 5-minute soak of
// every scenario is some hundred MB).
const maxResultsBytes = 2 << 30

// LoadResults reads a results.json (or .json.gz) written by any version of
// gpreempt-bench run: files from before repetitions existed read as one
// repetition. The per-scenario summaries are rebuilt when the file has
// none, with intervals only where request samples are present.
func LoadResults(path string) (*Results, error) { return loadResults(path, false) }

// loadResults is LoadResults, its figures derived afresh from the runs' samples where fresh.
func loadResults(path string, fresh bool) (*Results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResults, err)
	}
	defer f.Close()
	res, err := decodeResults(f, fresh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// DecodeResults is LoadResults on a reader.
func DecodeResults(r io.Reader) (*Results, error) { return decodeResults(r, false) }

func decodeResults(r io.Reader, fresh bool) (*Results, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxResultsBytes+1))
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrBadResults, err)
		}
		if b, err = io.ReadAll(io.LimitReader(zr, maxResultsBytes+1)); err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrBadResults, err)
		}
	}
	if len(b) > maxResultsBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadResults, maxResultsBytes)
	}
	var head struct {
		Schema int    `json:"schema"`
		Tool   string `json:"tool"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %w", ErrBadResults, err)
	}
	if head.Tool != "gpreempt-bench" {
		return nil, fmt.Errorf("%w: tool %q, want gpreempt-bench (is this a worker's file rather than results.json?)", ErrBadResults, head.Tool)
	}
	if head.Schema != 1 && head.Schema != ResultsSchemaVersion {
		return nil, fmt.Errorf("%w: schema %d; this binary reads 1 to %d", ErrBadResults, head.Schema, ResultsSchemaVersion)
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		// %v: a bad scenario name inside is the file's fault, not a usage
		// error of this command.
		return nil, fmt.Errorf("%w: %v", ErrBadResults, err)
	}
	if err := res.check(); err != nil {
		return nil, err
	}
	if fresh || res.Summaries == nil {
		reanalyze(&res)
	}
	return &res, nil
}

// reanalyze derives what the reports show from the runs' own samples again, with this binary's
// analysis.
func reanalyze(res *Results) {
	for _, sr := range res.Scenarios {
		if sr.LC != nil && len(sr.LC.Samples) > 0 {
			summarizeLC(sr)
		}
	}
	finalize(res, max(res.Config.Seed, 1))
}

// check refuses what no run writes.
func (res *Results) check() error {
	if len(res.Scenarios) == 0 {
		return fmt.Errorf("%w: no scenario runs", ErrBadResults)
	}
	seen := map[runKey]bool{}
	for i, sr := range res.Scenarios {
		if sr == nil || sr.Name == "" {
			return fmt.Errorf("%w: scenario run %d has no name", ErrBadResults, i)
		}
		if sr.Rep < 0 {
			return fmt.Errorf("%w: scenario %s: repetition %d", ErrBadResults, sr.Name, sr.Rep)
		}
		k := runKey{sr.Name, repOf(sr)}
		if seen[k] {
			return fmt.Errorf("%w: scenario %s repetition %d appears twice", ErrBadResults, sr.Name, k.rep)
		}
		seen[k] = true
	}
	for _, s := range res.Summaries {
		if s == nil || s.Name == "" {
			return fmt.Errorf("%w: a summary has no name", ErrBadResults)
		}
	}
	return nil
}

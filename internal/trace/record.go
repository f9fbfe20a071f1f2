package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// CallRecord is one Call as a recording holds it (`gpreemptctl trace requests --record`), a JSON
// line each: what replaying a process's launches and synchronizes through request.Delimiter
// needs, so that its tests run on what a real LC did.
type CallRecord struct {
	At      uint64 `json:"at_ns"`
	PID     uint32 `json:"pid"`
	TID     uint32 `json:"tid"`
	Role    string `json:"role"` // Role's name: launch, queue, sync, ...
	Kind    string `json:"kind"` // enter or return
	Symbol  string `json:"symbol"`
	OnCPU   int64  `json:"on_cpu_ns,omitempty"`
	Blocked uint64 `json:"blocked,omitempty"`
	Ret     uint64 `json:"ret,omitempty"`
}

// RecordOf is c as a recording holds it.
func RecordOf(c *Call) CallRecord {
	return CallRecord{At: c.At, PID: c.PID, TID: c.TID, Role: c.Role.String(), Kind: c.Kind.String(), Symbol: c.Symbol,
		OnCPU: int64(c.OnCPU), Blocked: c.Blocked, Ret: c.Ret}
}

// Limits of a recording read back: a line, a symbol's name, and the calls in all (a minute of an
// eager LC is ~700k; ~150 MB read back at most).
const (
	maxRecordLine   = 1 << 12
	maxRecordSymbol = 128
	maxRecordCalls  = 1 << 20
)

// ReadCalls reads a recording (gzip'd or not) back as Calls, in its order. A line that is no
// record is an error that names it; the calls before it come back with the error (a recording
// cut off by a kill is read up to its cut).
func ReadCalls(r io.Reader) ([]*Call, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("recording: gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	roles, kinds := map[string]Role{}, map[string]CallKind{}
	for r := RoleLaunch; r <= RoleQueue; r++ {
		roles[r.String()] = r
	}
	for _, k := range []CallKind{CallEnter, CallReturn} {
		kinds[k.String()] = k
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, maxRecordLine), maxRecordLine)
	var out []*Call
	symbols := map[string]string{} // one string per name: a recording repeats a few
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if len(out) == maxRecordCalls {
			return out, fmt.Errorf("recording line %d: more than %d calls", n, maxRecordCalls)
		}
		var rec CallRecord
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return out, fmt.Errorf("recording line %d: %w", n, err)
		}
		role, okRole := roles[rec.Role]
		kind, okKind := kinds[rec.Kind]
		switch {
		case len(bytes.TrimSpace(line[dec.InputOffset():])) > 0:
			return out, fmt.Errorf("recording line %d: more after the record", n)
		case !okRole:
			return out, fmt.Errorf("recording line %d: role %q: want launch, sync, hint, ready, cancel or queue", n, rec.Role)
		case !okKind:
			return out, fmt.Errorf("recording line %d: kind %q: want enter or return", n, rec.Kind)
		case rec.OnCPU < 0:
			return out, fmt.Errorf("recording line %d: on_cpu_ns %d: a CPU time is never negative", n, rec.OnCPU)
		case len(rec.Symbol) > maxRecordSymbol:
			return out, fmt.Errorf("recording line %d: a symbol of %d bytes: want at most %d", n, len(rec.Symbol), maxRecordSymbol)
		}
		sym, ok := symbols[rec.Symbol]
		if !ok {
			sym, symbols[rec.Symbol] = rec.Symbol, rec.Symbol
		}
		out = append(out, &Call{Kind: kind, PID: rec.PID, TID: rec.TID, At: rec.At, Role: role, Symbol: sym,
			OnCPU: time.Duration(rec.OnCPU), Blocked: rec.Blocked, Ret: rec.Ret})
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("recording after line %d: %w", n, err)
	}
	return out, nil
}

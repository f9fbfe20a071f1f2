package trace_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

func TestReadCalls(t *testing.T) {
	launch := `{"at_ns":1000,"pid":7,"tid":8,"role":"launch","kind":"enter","symbol":"cuLaunchKernel","on_cpu_ns":5000}`
	ret := `{"at_ns":2000,"pid":7,"tid":8,"role":"sync","kind":"return","symbol":"cuStreamSynchronize","ret":0}`
	tests := []struct {
		name, in string
		want     int
		err      string
	}{
		{"two calls", launch + "\n\n" + ret + "\n", 2, ""},
		{"empty", "", 0, ""},
		{"unknown role", strings.Replace(launch, `"launch"`, `"teleport"`, 1), 0, `recording line 1: role "teleport"`},
		{"unknown kind", strings.Replace(launch, `"enter"`, `"both"`, 1), 0, `recording line 1: kind "both"`},
		{"unknown field", strings.Replace(launch, `"pid"`, `"pidd"`, 1), 0, `recording line 1: json: unknown field "pidd"`},
		{"negative CPU time", strings.Replace(launch, `5000`, `-5`, 1), 0, "recording line 1: on_cpu_ns -5"},
		{"not JSON", launch + "\nlaunch at 3000\n", 0, "recording line 2"},
		{"line too long", strings.Repeat(" ", 5000) + launch, 0, "recording after line 0: bufio.Scanner: token too long"},
		{"more after the record", launch + ` {"at_ns":3}`, 0, "recording line 1: more after the record"},
		{"symbol too long", strings.Replace(launch, `"cuLaunchKernel"`, `"`+strings.Repeat("x", 129)+`"`, 1), 0, "a symbol of 129 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := trace.ReadCalls(strings.NewReader(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("%d calls, %v; want %d", len(got), err, tt.want)
			}
		})
	}
	got, err := trace.ReadCalls(strings.NewReader(launch))
	want := trace.Call{Kind: trace.CallEnter, PID: 7, TID: 8, At: 1000, Role: trace.RoleLaunch, Symbol: "cuLaunchKernel", OnCPU: 5 * time.Microsecond}
	if err != nil || len(got) != 1 || *got[0] != want {
		t.Errorf("%+v, %v; want %+v", got, err, want)
	}
	// gzip'd, as --record writes a .gz
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	z.Write([]byte(launch + "\n" + ret + "\n"))
	z.Close()
	if got, err := trace.ReadCalls(&b); err != nil || len(got) != 2 {
		t.Errorf("gzip'd: %d calls, %v", len(got), err)
	}
	if _, err := trace.ReadCalls(bytes.NewReader([]byte{0x1f, 0x8b, 0})); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a broken gzip: %v", err)
	}
	// Cut off (a trace killed before it closed its file): the calls before the cut come back.
	if got, err := trace.ReadCalls(strings.NewReader(launch + "\n" + ret[:40])); err == nil || len(got) != 1 {
		t.Errorf("cut off: %d calls, %v; want the first and an error", len(got), err)
	}
	b.Reset()
	z = gzip.NewWriter(&b)
	z.Write([]byte(strings.Repeat(launch+"\n", 100)))
	z.Flush() // as a trace flushes at each interval, then killed before its trailer
	if got, err := trace.ReadCalls(&b); err == nil || len(got) != 100 {
		t.Errorf("gzip without its trailer: %d calls, %v; want 100 and an error", len(got), err)
	}
}

// FuzzReadCalls: a recording read back is written again the same, whatever the bytes.
func FuzzReadCalls(f *testing.F) {
	f.Add([]byte(`{"at_ns":1000,"pid":7,"tid":8,"role":"launch","kind":"enter","symbol":"cuLaunchKernel","on_cpu_ns":5000}` + "\n"))
	f.Add([]byte(`{"at_ns":2,"pid":1,"tid":1,"role":"queue","kind":"return","symbol":"","ret":18446744073709551615}`))
	f.Add([]byte("\n\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		calls, err := trace.ReadCalls(bytes.NewReader(b))
		if err != nil {
			return
		}
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		for _, c := range calls {
			if err := enc.Encode(trace.RecordOf(c)); err != nil {
				t.Fatal(err)
			}
		}
		again, err := trace.ReadCalls(&out)
		if err != nil || len(again) != len(calls) {
			t.Fatalf("written again: %d calls, %v; want %d", len(again), err, len(calls))
		}
		for i := range calls {
			if *again[i] != *calls[i] {
				t.Fatalf("call %d: %+v, then %+v", i, *calls[i], *again[i])
			}
		}
	})
}

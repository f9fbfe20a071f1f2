package policy

import (
	"strings"
	"testing"
	"time"
)

func TestParseGate(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       Gate
		err        string // a part of the error; "" for none
	}{
		{name: "absent", yaml: "version: 1\n", want: DefaultGate()},
		{name: "on", yaml: "gate:\n  mode: on\n", want: Gate{Mode: GateOn, Idle: DefaultGateIdle, MaxHold: DefaultGateMaxHold, Share: DefaultGateShare, LaunchProbes: LaunchProbesAuto}},
		{name: "all fields", yaml: "gate:\n  mode: auto\n  idle: 5ms\n  max_hold: 500ms\n  share: 0.25\n",
			want: Gate{Mode: GateAuto, Idle: 5 * time.Millisecond, MaxHold: 500 * time.Millisecond, Share: 0.25, LaunchProbes: LaunchProbesAuto}},
		{name: "probes always", yaml: "gate:\n  mode: on\n  launch_probes: always\n", want: Gate{Mode: GateOn, Idle: DefaultGateIdle, MaxHold: DefaultGateMaxHold, Share: DefaultGateShare, LaunchProbes: LaunchProbesAlways}},
		{name: "bad probes", yaml: "gate:\n  launch_probes: never\n", err: `line 2: gate.launch_probes: "never": want auto, between or always`},
		{name: "bad mode", yaml: "gate:\n  mode: always\n", err: `line 2: gate.mode: "always": want off, on or auto`},
		{name: "idle too short", yaml: "gate:\n  idle: 10us\n", err: "line 2: gate.idle"},
		{name: "hold too long", yaml: "gate:\n  max_hold: 1m\n", err: "line 2: gate.max_hold"},
		{name: "share zero", yaml: "gate:\n  share: 0\n", err: "line 2: gate.share"},
		{name: "hold over budget", yaml: "gate:\n  max_hold: 5s\n  share: 0.1\n", err: "exceeds the gate's budget"},
		{name: "unknown field", yaml: "gate:\n  modes: on\n", err: "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Gate != tc.want {
				t.Errorf("gate %+v, want %+v", p.Gate, tc.want)
			}
		})
	}
}

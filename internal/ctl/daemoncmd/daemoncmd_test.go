package daemoncmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/golden"
)

// fakeDaemon answers the API with canned bodies on a unix socket.
func fakeDaemon(t *testing.T) string {
	return fakeDaemonWith(t, `{"mode":"bpf","policy":"/etc/gpreempt/gpreemptd.yaml","processes":1,"groups":4}`)
}

func fakeDaemonWith(t *testing.T, statusBody string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(statusBody))
	})
	mux.HandleFunc("GET /v1/processes", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`[{"pid":42,"comm":"trainer","uid":1000,"class":"be","rule":"from-env","groups":[
			{"id":{"client":"0xc1d00022","handle":"0x5c000015"},"engine":"compute","timeslice_us":200,"interleave":"low"}]}]`))
	})
	mux.HandleFunc("GET /v1/classes", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"classes":[{"name":"lc","timeslice":"5s","interleave":"high"}],"default":"none",
			"rules":[{"name":"from-env","line":7,"class":"","class_from_env":"GPREEMPT_CLASS"}]}`))
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte(`{"error":"line 3: rules[0].clas: unknown field (the running policy is kept)"}`))
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.App{Name: "gpreemptctl", Writer: &out, ErrWriter: &out,
		Flags:    []cli.Flag{&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table"}},
		Commands: []*cli.Command{Command}, ExitErrHandler: func(*cli.Context, error) {}}
	err := app.RunContext(context.Background(), append([]string{"gpreemptctl"}, args...))
	return out.String(), err
}

func TestDaemonCommands(t *testing.T) {
	sock := fakeDaemon(t)
	out, err := run(t, "daemon", "status", "--socket", sock)
	if err != nil || !strings.Contains(out, "mode:") || !strings.Contains(out, "42   trainer  1000  be") || !strings.Contains(out, "200us/low") {
		t.Errorf("status: %v\n%s", err, out)
	}
	out, err = run(t, "-o", "json", "daemon", "status", "--socket", sock)
	var v map[string]any
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v["status"] == nil || v["processes"] == nil {
		t.Errorf("status -o json: %v\n%s", err, out)
	}
	out, err = run(t, "daemon", "classes", "--socket", sock)
	if err != nil || !strings.Contains(out, "$GPREEMPT_CLASS") || !strings.Contains(out, "lc     5s") {
		t.Errorf("classes: %v\n%s", err, out)
	}
	if _, err = run(t, "daemon", "reload", "--socket", sock); err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("reload of a bad file: %v", err)
	}
	if _, err = run(t, "daemon", "status", "--socket", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Errorf("no daemon: %v", err)
	}
}

func TestStatusSLO(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"status-slo", `{"mode":"bpf","processes":1,"groups":4,
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"},{"name":"burstable","timeslice":"2ms","interleave":"medium"},{"name":"be","timeslice":"1ms","interleave":"low"}],
			"slo":{"enabled":true,"window":"1s","be_timeslice":"1ms","arm":"1ms","phase":"deciding","calibration":{"paused_windows":6,"windows":6,"of":57},
				"safe":"200µs","ladder":"1µs,50µs,200µs,500µs,1ms,2ms,3ms","min_be_share":0.85,"be_share":0.871,
				"be":[{"pid":42,"comm":"trainer","launches_per_s":9581.6,"alone_per_s":11001,"share":0.871,"signal":"counted"},
					{"pid":57,"comm":"bulk","launches_per_s":12040,"alone_per_s":12100,"share":0.995,"signal":"counted","apart":true}],
				"worst_lc_vs_objective":0.955,"changes":4,"prepreempt":false,
				"lc":[{"pid":100,"comm":"lc-server","objective":"p50<=1.05x","latency_us":5640,"target_us":5922,"ratio":0.952,"requests":50,"signal":"pushed",
						"reference":"standalone (BE paused) 5.64ms, learnt in window 7"},
					{"pid":101,"comm":"lc-quiet","objective":"p99<=2ms","latency_us":0,"target_us":0,"requests":0,"signal":"none pushed"}],
				"last":{"window":57,"be_timeslice":"1ms","arm":"1ms","phase":"deciding","changed":false,"cause":"within","reason":"within objectives","aligned":true},
				"last_change":{"window":40,"be_timeslice":"1ms","changed":true,"cause":"violation","reason":"LC at 1.12x its objective under 2ms: back to 1ms, which met it"},
				"searches":[{"gpus":[0],"be_timeslice":"1ms","arm":"1ms","lcs":1,"changes":4,"prepreempt":false,
					"arms":[{"arm":"500µs","be_share":0.84,"verdict":"might meet, BE under its minimum","lo":0.82},
						{"arm":"1ms","lc_vs_objective":0.955,"lo":0.871,"hi":1.039,"be_share":0.871,"verdict":"might meet"},
						{"arm":"2ms","lc_vs_objective":1.12,"lo":1.021,"hi":1.219,"be_share":0.912,"verdict":"misses","retry_in_windows":104},
						{"arm":"3ms","verdict":"misses","lo":1.05,"retry_in_windows":215}]}]}}`},
		{"status-slo-shared-floor", `{"mode":"bpf","processes":4,"groups":16,
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"},{"name":"be","timeslice":"50µs","interleave":"low"}],
			"slo":{"enabled":true,"window":"1s","be_timeslice":"50µs","safe":"200µs","shared_floor":"50µs","ladder":"1µs,50µs,100µs,200µs","changes":3,"prepreempt":true,
				"be":[{"pid":42,"comm":"trainer","launches_per_s":3120,"alone_per_s":0,"signal":"learning its rate alone (1 of 3 windows without LC)"},
					{"pid":43,"comm":"bulk","launches_per_s":0,"alone_per_s":0,"signal":"not counted: library not found: process 43 has no libcuda.so.1 mapped (not a CUDA process yet, or name the file)"}]}}`},
		{"status-slo-pause", `{"mode":"bpf","processes":2,"groups":8,
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"},{"name":"be","timeslice":"200µs","interleave":"low"}],
			"slo":{"enabled":true,"window":"1s","be_timeslice":"200µs","safe":"200µs","ladder":"1µs,50µs,200µs,500µs,1ms","changes":0,"prepreempt":true,
				"calibrate":"pause","be_stopped":[4242,4250],
				"last":{"window":3,"be_timeslice":"200µs","changed":false,"cause":"calibrate","reason":"learning an LC's standalone latency with BE stopped (5 windows)"}}}`},
		{"status-slo-per-gpu", `{"mode":"bpf","processes":4,"groups":16,
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"},{"name":"be","timeslice":"50µs","interleave":"low"}],
			"slo":{"enabled":true,"window":"1s","safe":"200µs","shared_floor":"200µs","ladder":"1µs,50µs,200µs,500µs,1ms,2ms,3ms","min_be_share":0.85,
				"be":[{"pid":42,"comm":"trainer","launches_per_s":9581.6,"alone_per_s":11001,"share":0.871,"signal":"counted","timeslice":"1ms"},
					{"pid":43,"comm":"trainer","launches_per_s":8900,"alone_per_s":10000,"share":0.89,"signal":"counted","timeslice":"50µs"}],
				"worst_lc_vs_objective":0.97,"changes":9,"prepreempt":false,
				"lc":[{"pid":100,"comm":"lc-eager","objective":"p50<=1.05x","latency_us":5640,"target_us":5922,"ratio":0.952,"requests":50,"signal":"pushed","gpus":[0]},
					{"pid":101,"comm":"lc-graph","objective":"p50<=1.05x","latency_us":31.4,"target_us":32.4,"ratio":0.97,"requests":300,"signal":"pushed","gpus":[1]}],
				"searches":[{"gpus":[0],"be_timeslice":"1ms","arm":"1ms+gate","phase":"deciding","calibration":{"paused_windows":6,"windows":6,"of":57},
						"be_share":0.871,"worst_lc_vs_objective":0.952,"lcs":1,"changes":5,"prepreempt":false,
						"arms":[{"arm":"1ms+gate","lc_vs_objective":0.952,"lo":0.90,"hi":0.99,"be_share":0.871,"verdict":"meets"}],
						"last":{"window":57,"be_timeslice":"1ms","changed":false,"cause":"within","reason":"within objectives"},
						"last_change":{"window":40,"be_timeslice":"1ms","changed":true,"cause":"violation","reason":"LC at 1.12x its objective under 2ms: back to 1ms, which met it"}},
					{"gpus":[1],"be_timeslice":"50µs","arm":"50µs+prepreempt","phase":"calibrating","calibration":{"paused_windows":0,"windows":14,"of":57},
						"be_share":0.89,"worst_lc_vs_objective":0.97,"lcs":1,"changes":4,"prepreempt":true,
						"last":{"window":57,"be_timeslice":"50µs","changed":false,"cause":"within","reason":"within objectives"}}]}}`},
		{"status-gate", `{"mode":"bpf","processes":0,"groups":0,"uptime_s":0,
			"gate":{"be_stopped":55,"closed":{"idle":54,"max_hold":1},"failures":0,"held":55,"held_seconds":7.4777431110000006,"lcs":1,"mode":"on","open":0},
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"}]}`},
		{"status-slo-off", `{"mode":"scan","processes":1,"groups":4,
			"classes":[{"name":"lc","timeslice":"5s","interleave":"high"},{"name":"be","timeslice":"200µs","interleave":"low"}],
			"slo":{"enabled":false,"changes":0,"prepreempt":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, "daemon", "status", "--socket", fakeDaemonWith(t, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, tc.name, []byte(out))
		})
	}
}

// TestToTell: an arm that might meet is told from its objective once its bounds, narrowing as the square root of
// its measurements, leave 1; the others, or one without a mean and both bounds, say nothing.
func TestToTell(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		name string
		arm  api.SLOArm
		want string
	}{
		{"near the objective: 0.144 either way, 0.017 from it", api.SLOArm{LCVsObjective: f(1.017), Lo: f(0.873), Hi: f(1.161), Verdict: "might meet"}, ", told apart in ~72 times its measurements"},
		{"nearly told: 1.5 times, as twice", api.SLOArm{LCVsObjective: f(0.912), Lo: f(0.803), Hi: f(1.021), Verdict: "might meet"}, ", told apart in ~2 times its measurements"},
		{"told at once: under 2 times, as twice", api.SLOArm{LCVsObjective: f(0.9), Lo: f(0.85), Hi: f(0.95), Verdict: "might meet"}, ", told apart in ~2 times its measurements"},
		{"on the objective", api.SLOArm{LCVsObjective: f(1), Lo: f(0.9), Hi: f(1.1), Verdict: "might meet"}, ", on its objective: not told apart in 1000 times its measurements"},
		{"a hair from it", api.SLOArm{LCVsObjective: f(1.0001), Lo: f(0.9), Hi: f(1.1), Verdict: "might meet"}, ", on its objective: not told apart in 1000 times its measurements"},
		{"a bound from a neighbour", api.SLOArm{Lo: f(0.8), Verdict: "might meet"}, ""},
		{"meets", api.SLOArm{LCVsObjective: f(0.8), Lo: f(0.7), Hi: f(0.9), Verdict: "meets"}, ""},
		{"BE under its minimum", api.SLOArm{LCVsObjective: f(0.95), Lo: f(0.85), Hi: f(1.05), Verdict: "might meet, BE under its minimum"}, ""},
	} {
		if got := toTell(c.arm); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestFrontierToldOnlyOfOneObjective: the frontier says what telling an arm from its objective takes only where one
// LC objective is in force; of several, an arm's mean and bounds may come from different ones.
func TestFrontierToldOnlyOfOneObjective(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	searches := []api.SLOSearch{{Arm: "1ms", Arms: []api.SLOArm{{Arm: "1ms", LCVsObjective: f(0.95), Lo: f(0.87), Hi: f(1.04), Verdict: "might meet"}}}}
	for _, one := range []bool{true, false} {
		var b bytes.Buffer
		frontier(&b, searches, false, one)
		if got := strings.Contains(b.String(), "might meet, told apart in ~3 times its measurements"); got != one {
			t.Errorf("one objective %v: told %v:\n%s", one, got, b.String())
		}
	}
}

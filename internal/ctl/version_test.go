package ctl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/golden"
	"github.com/gpreempt/gpreempt/internal/version"
)

func TestVersion(t *testing.T) {
	stamped := func() version.Info {
		return version.Info{Version: "0.3.0", Revision: "0f52e92c1d7a5b1f0d2a8c3e4b5f6a7b8c9d0e1f",
			Time: "2026-11-22T11:58:03Z", Modified: true, Go: "go1.26.8", Platform: "linux/arm64"}
	}
	tests := []struct {
		name string
		args []string
	}{
		{"version", []string{"version"}},
		{"version-flag", []string{"--version"}},
		{"version-json", []string{"-o", "json", "version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env, stdout, stderr := world(t)
			env.Version = stamped
			if code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...)); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden.Check(t, tt.name, stdout.Bytes())
		})
	}
	// The real binary's first line is the one every gpreempt binary
	// prints: the release version and the revision.
	_, env, stdout, stderr := world(t)
	if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "version"}); code != 0 || !strings.HasPrefix(stdout.String(), version.Get().Line("gpreemptctl")+"\n") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestCompletion(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"completion", "bash"}, 0, []string{"complete -o bashdefault -o default -F _gpreemptctl_complete gpreemptctl"}},
		{[]string{"completion", "zsh"}, 0, []string{"#compdef gpreemptctl", "compdef _gpreemptctl_complete gpreemptctl"}},
		{[]string{"completion", "fish"}, ctl.ExitUsage, nil},
		{[]string{"completion"}, ctl.ExitUsage, nil},
		// What the scripts ask for: the commands, then a group's
		// subcommands, then a command's flags; nothing reaches a process.
		{[]string{"--generate-bash-completion"}, 0, []string{"ps\n", "class\n", "reset\n", "trace\n", "completion\n"}},
		{[]string{"trace", "--generate-bash-completion"}, 0, []string{"tsg\n", "rpc\n", "requests\n", "hints\n"}},
		{[]string{"reset", "-", "--generate-bash-completion"}, 0, []string{"--pid\n", "--all\n"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, env, stdout, stderr := world(t)
			env.Host = nil // completing must not look at processes
			// urfave/cli reads the word being completed from os.Args.
			saved := os.Args
			os.Args = append([]string{"gpreemptctl"}, tt.args...)
			defer func() { os.Args = saved }()
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
			if tt.code == 0 && len(tt.args) == 2 && tt.args[0] == "completion" {
				if sh, err := exec.LookPath(tt.args[1]); err == nil {
					if out, err := exec.Command(sh, "-n", "-c", stdout.String()).CombinedOutput(); err != nil {
						t.Errorf("%s -n: %v: %s", sh, err, out)
					}
				}
			}
		})
	}
}

// TestManPage: every command has its section in the page generated from
// the definitions, and groff reads it without a warning.
func TestManPage(t *testing.T) {
	page, err := ctl.ManPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range ctl.NewApp(ctl.Env{}).Commands {
		if cmd.Hidden {
			continue
		}
		if !strings.Contains(page, "\n.SH "+cmd.Name+"\n") {
			t.Errorf("no section for %s", cmd.Name)
		}
		for _, sub := range cmd.Subcommands {
			if sub.Name == "help" { // urfave/cli's, added once help was shown
				continue
			}
			if !strings.Contains(page, "\n.SS "+sub.Name+"\n") {
				t.Errorf("no section for %s %s", cmd.Name, sub.Name)
			}
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff not installed: the page's markup is not checked")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff: %v: %s", err, out)
	}
}

// TestCompletionScript sources the bash script and completes as bash would,
// with gpreemptctl (this test binary) on the PATH.
func TestCompletionScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := os.Symlink(self, filepath.Join(bin, "gpreemptctl")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		words []string // the last is the word being completed
		want  string
	}{
		{[]string{"tr"}, "trace"},
		{[]string{"trace", "r"}, "rpc requests"},
		{[]string{"reset", "--"}, "--pid --all --help"},
		{[]string{"reset", "--p"}, "--pid"},
		{[]string{"--de"}, "--demo"},
		{[]string{"completion", "ba"}, "bash"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.words, " "), func(t *testing.T) {
			words := append([]string{"gpreemptctl"}, tt.words...)
			script := `source <(gpreemptctl completion bash)
COMP_WORDS=(` + strings.Join(words, " ") + `); COMP_CWORD=` + fmt.Sprint(len(words)-1) + `
_gpreemptctl_complete; echo "${COMPREPLY[*]}"`
			cmd := exec.Command(bash, "-c", script)
			cmd.Env = append(os.Environ(), asGpreemptctl+"=1", "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("completes to %q, want %q", got, tt.want)
			}
		})
	}
}

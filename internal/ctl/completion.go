package ctl

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// The scripts ask gpreemptctl itself for the words that may follow what was
// typed (urfave/cli's --generate-bash-completion, answered before any flag
// takes effect, so completing touches neither the driver nor a process).
// From urfave/cli's autocomplete/ scripts, with the program named.
const bashCompletion = `# bash completion for PROG; load it with: source <(PROG completion bash)
_PROG_complete() {
  local cur words cword
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:$COMP_CWORD}")
  local request="${words[*]} --generate-bash-completion"
  if [[ "$cur" == -* ]]; then
    # "-", not what was typed: urfave/cli completes nothing after "--".
    request="${words[*]} - --generate-bash-completion"
  fi
  local opts
  opts=$(eval "${request}" 2>/dev/null)
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _PROG_complete PROG
`

const zshCompletion = `#compdef PROG
# zsh completion for PROG; load it with: source <(PROG completion zsh)
_PROG_complete() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} - --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _PROG_complete PROG
`

var completionCommand = &cli.Command{
	Name:      "completion",
	Usage:     "print a shell completion script (bash or zsh)",
	ArgsUsage: "bash|zsh",
	Description: "bash: source <(gpreemptctl completion bash), or save it under\n" +
		"/etc/bash_completion.d/gpreemptctl. zsh: source <(gpreemptctl completion zsh).",
	BashComplete: func(c *cli.Context) {
		if c.NArg() == 0 {
			fmt.Fprint(c.App.Writer, "bash\nzsh\n")
		}
	},
	Action: func(c *cli.Context) error {
		shell, err := oneArg(c, "bash|zsh")
		if err != nil {
			return err
		}
		var script string
		switch shell {
		case "bash":
			script = bashCompletion
		case "zsh":
			script = zshCompletion
		default:
			return fmt.Errorf("%w: completion %q: want bash or zsh", ErrInvalidArgument, shell)
		}
		_, err = fmt.Fprint(c.App.Writer, strings.ReplaceAll(script, "PROG", c.App.Name))
		return err
	},
}

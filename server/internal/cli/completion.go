package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// completion prints a shell completion script built from the command
// table, so it knows every command without a list kept by hand. Flags are
// completed from the command's own --help at completion time.
func (e env) completion(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	if fs.NArg() != 1 || fs.Arg(0) != "bash" {
		fmt.Fprintln(e.stderr, "usage: progressdb completion bash   (the only shell supported)")
		return exitUsage
	}
	fmt.Fprint(e.stdout, bashCompletion(commands()))
	return exitOK
}

// bashCompletion completes command words from the table: for each run of
// words typed so far, the words that may follow. Once a whole command is
// typed, a word starting with - completes from that command's --help.
func bashCompletion(cmds []command) string {
	next := map[string][]string{} // words typed so far -> next words
	var whole []string            // complete command names
	for _, c := range append(cmds, command{name: "help"}) {
		words := strings.Fields(c.name)
		for i := range words {
			key := strings.Join(words[:i], " ")
			if !slices.Contains(next[key], words[i]) {
				next[key] = append(next[key], words[i])
			}
		}
		if c.run != nil {
			whole = append(whole, c.name)
		}
	}
	keys := make([]string, 0, len(next))
	for k := range next {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	quoted := make([]string, len(whole))
	for i, name := range whole {
		quoted[i] = strconv.Quote(name)
	}
	commandNames := strings.Join(quoted, "|")
	var b strings.Builder
	// typed collects the command's words, up to the first flag or until
	// they name a whole command (what follows is arguments).
	b.WriteString(`# bash completion for progressdb: source <(progressdb completion bash)
_progressdb() {
	local cur=${COMP_WORDS[COMP_CWORD]} typed="" w i
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		[[ $w == -* ]] && break
		case "$typed" in
		` + commandNames + `) break ;;
		esac
		typed+="${typed:+ }$w"
	done
	if [[ $cur == -* ]]; then
		case "$typed" in
`)
	fmt.Fprintf(&b, "\t\t%s)\n", commandNames)
	b.WriteString("\t\t\tCOMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" $typed --help 2>/dev/null | sed -n 's/^  \\(--[a-z-]*\\).*/\\1/p')\" -- \"$cur\")) ;;\n")
	b.WriteString("\t\tesac\n\t\treturn\n\tfi\n\tcase \"$typed\" in\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "\t%q) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", k, strings.Join(next[k], " "))
	}
	b.WriteString("\tesac\n}\ncomplete -F _progressdb progressdb\n")
	return b.String()
}

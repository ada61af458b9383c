package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// shells maps each supported shell to the script generator. Every script
// is built from the command table (completionTree), so none keeps a list
// of commands by hand; flags are completed from the command's own --help
// at completion time.
var shells = map[string]func(completionTree) string{
	"bash": bashCompletion,
	"zsh":  zshCompletion,
	"fish": fishCompletion,
}

// completion prints a shell completion script.
func (e env) completion(_ context.Context, args []string) int {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	if !e.parseFlags(fs, args, true) {
		return exitUsage
	}
	gen, ok := shells[fs.Arg(0)]
	if fs.NArg() != 1 || !ok {
		fmt.Fprintln(e.stderr, "usage: progressdb completion bash|zsh|fish")
		return exitUsage
	}
	fmt.Fprint(e.stdout, gen(newCompletionTree(commands())))
	return exitOK
}

// completionWord is a word that may follow the words typed so far, with
// what it does (the command's summary, or the commands of a group).
type completionWord struct {
	word, desc string
}

// completionTree is the command table as shells complete it: for each run
// of words typed so far (keys, sorted), the words that may follow; and the
// whole command names, after which come arguments and flags.
type completionTree struct {
	keys  []string
	next  map[string][]completionWord
	whole []string
}

func newCompletionTree(cmds []command) completionTree {
	t := completionTree{next: map[string][]completionWord{}}
	help := command{name: "help", summary: "the commands, or one command's flags and arguments"}
	summary := map[string]string{}
	for _, c := range append(cmds, help) {
		summary[c.name] = c.summary
	}
	for _, c := range append(cmds, help) {
		words := strings.Fields(c.name)
		for i := range words {
			key := strings.Join(words[:i], " ")
			if slices.ContainsFunc(t.next[key], func(w completionWord) bool { return w.word == words[i] }) {
				continue
			}
			desc, ok := summary[strings.Join(words[:i+1], " ")]
			if !ok {
				desc = words[i] + " commands"
			}
			t.next[key] = append(t.next[key], completionWord{words[i], desc})
		}
		if c.run != nil {
			t.whole = append(t.whole, c.name)
		}
	}
	for k := range t.next {
		t.keys = append(t.keys, k)
	}
	slices.Sort(t.keys)
	return t
}

// words returns the words that may follow key, space-separated.
func (t completionTree) words(key string) string {
	ws := make([]string, len(t.next[key]))
	for i, w := range t.next[key] {
		ws[i] = w.word
	}
	return strings.Join(ws, " ")
}

// wholePattern is the whole command names as a shell case pattern.
func (t completionTree) wholePattern() string {
	quoted := make([]string, len(t.whole))
	for i, name := range t.whole {
		quoted[i] = strconv.Quote(name)
	}
	return strings.Join(quoted, "|")
}

// flagsFromHelp is the shell pipeline that turns a command's --help into
// its flag names, one a line.
const flagsFromHelp = `sed -n 's/^  \(--[a-z-]*\).*/\1/p'`

// bashCompletion completes command words from the table: for each run of
// words typed so far, the words that may follow. Once a whole command is
// typed, a word starting with - completes from that command's --help, and
// any other word as a file name.
func bashCompletion(t completionTree) string {
	commandNames := t.wholePattern()
	var b strings.Builder
	b.WriteString(`# bash completion for progressdb: source <(progressdb completion bash)
_progressdb() {
	local cur=${COMP_WORDS[COMP_CWORD]} typed="" w i
` + typedLoop(1, "COMP_CWORD", "COMP_WORDS", commandNames) + `	if [[ $cur == -* ]]; then
		case "$typed" in
`)
	fmt.Fprintf(&b, "\t\t%s)\n", commandNames)
	b.WriteString("\t\t\tCOMPREPLY=($(compgen -W \"$(\"${COMP_WORDS[0]}\" $typed --help 2>/dev/null | " + flagsFromHelp + ")\" -- \"$cur\")) ;;\n")
	b.WriteString("\t\tesac\n\t\treturn\n\tfi\n\tcase \"$typed\" in\n")
	// After a whole command come its arguments: file names (audit show
	// FILE, export read FILE), as zsh and fish offer.
	fmt.Fprintf(&b, "\t%s)\n\t\tcompopt -o filenames 2>/dev/null\n\t\tCOMPREPLY=($(compgen -f -- \"$cur\")) ;;\n", commandNames)
	for _, k := range t.keys {
		fmt.Fprintf(&b, "\t%q) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", k, t.words(k))
	}
	b.WriteString("\tesac\n}\ncomplete -F _progressdb progressdb\n")
	return b.String()
}

// typedLoop is the bash and zsh loop that collects in typed the command's
// words before the cursor (words[first] to words[cursor-1]), up to the
// first flag or until they name a whole command (what follows is
// arguments).
func typedLoop(first int, cursor, words, commandNames string) string {
	return fmt.Sprintf(`	for ((i = %d; i < %s; i++)); do
		w=${%s[i]}
		[[ $w == -* ]] && break
		case "$typed" in
		%s) break ;;
		esac
		typed+="${typed:+ }$w"
	done
`, first, cursor, words, commandNames)
}

// shellQuote quotes s in single quotes for zsh or fish; quote is how a
// single quote inside is written (zsh ends the string, escapes one and
// starts again; fish escapes it with a backslash).
func shellQuote(s, quote string) string {
	return "'" + strings.ReplaceAll(s, "'", quote) + "'"
}

// zshCompletion is the same walk as bash's, with each word's description
// (_describe) and file names after a whole command.
func zshCompletion(t completionTree) string {
	commandNames := t.wholePattern()
	var b strings.Builder
	b.WriteString(`#compdef progressdb
# zsh completion for progressdb: source <(progressdb completion zsh) after
# compinit, or save it as _progressdb in a folder of $fpath.
_progressdb() {
	local typed="" w i cur=${words[CURRENT]}
	local -a cands
` + typedLoop(2, "CURRENT", "words", commandNames) + `	case "$typed" in
	` + commandNames + `)
		if [[ $cur == -* ]]; then
			cands=(${(f)"$(${words[1]} ${=typed} --help 2>/dev/null | ` + flagsFromHelp + `)"})
			compadd -- $cands
		else
			_files
		fi
		return ;;
`)
	for _, k := range t.keys {
		fmt.Fprintf(&b, "\t%s)\n\t\tcands=(", shellQuote(k, `'\''`))
		for i, w := range t.next[k] {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(shellQuote(w.word+":"+w.desc, `'\''`))
		}
		b.WriteString(")\n\t\t_describe -t commands 'progressdb command' cands ;;\n")
	}
	b.WriteString("\tesac\n}\nif (( $+functions[compdef] )); then\n\tcompdef _progressdb progressdb\nfi\n")
	return b.String()
}

// fishCompletion declares one completion per word of the table, each on
// the condition that the words typed so far are its prefix; after a whole
// command, fish completes file names, and flags from --help.
func fishCompletion(t completionTree) string {
	var b strings.Builder
	b.WriteString(`# fish completion for progressdb: progressdb completion fish | source
# (or save it as ~/.config/fish/completions/progressdb.fish)

# The command words typed so far, up to the first flag or a whole command.
function __progressdb_typed
	set -l typed
	for w in (commandline -opc)[2..-1]
		string match -q -- '-*' $w; and break
		contains -- (string join ' ' $typed) ` + t.wholeFish() + `; and break
		set -a typed $w
	end
	string join ' ' $typed
end

function __progressdb_after
	set -l typed (__progressdb_typed)
	test "$typed" = "$argv[1]"
end

# A whole command is typed and the word being completed is a flag.
function __progressdb_flag
	set -l typed (__progressdb_typed)
	contains -- "$typed" ` + t.wholeFish() + `; or return 1
	string match -q -- '-*' (commandline -ct)
end

function __progressdb_flags
	set -l bin (commandline -opc)[1]
	$bin (string split ' ' (__progressdb_typed)) --help 2>/dev/null | ` + flagsFromHelp + `
end

complete -c progressdb -n __progressdb_flag -f -a '(__progressdb_flags)'
`)
	for _, k := range t.keys {
		for _, w := range t.next[k] {
			fmt.Fprintf(&b, "complete -c progressdb -n %s -f -a %s -d %s\n",
				shellQuote("__progressdb_after "+shellQuote(k, `\'`), `\'`), shellQuote(w.word, `\'`), shellQuote(w.desc, `\'`))
		}
	}
	return b.String()
}

// wholeFish is the whole command names as fish arguments.
func (t completionTree) wholeFish() string {
	quoted := make([]string, len(t.whole))
	for i, name := range t.whole {
		quoted[i] = shellQuote(name, `\'`)
	}
	return strings.Join(quoted, " ")
}

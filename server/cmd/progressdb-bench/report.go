package main

import (
	"fmt"
	"strings"
	"time"
)

// report is everything BENCHMARKS.md shows.
type report struct {
	command  string
	machine  machine
	scale    float64
	started  time.Time
	finished time.Time
	loadEnd  string
	sections []*section
}

// section is one scenario's results.
type section struct {
	id, title string
	setup     []string // paragraphs: data, method
	tables    []table
	targets   []target
	notes     []string // paragraphs after the tables: findings, misses
	elapsed   time.Duration
	load      string // load average at its start
	err       string
}

type table struct {
	caption string
	header  []string
	rows    [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// target is one pass/miss line of the summary.
type target struct {
	name string // what is compared
	want string // the target, e.g. "≥ 50×"
	got  string // the measured ratio with its inputs
	pass bool
}

func (s *section) addTarget(name, want, got string, pass bool) {
	s.targets = append(s.targets, target{name: name, want: want, got: got, pass: pass})
}

func verdict(pass bool) string {
	if pass {
		return "pass"
	}
	return "**miss**"
}

func (t table) markdown(sb *strings.Builder) {
	if t.caption != "" {
		fmt.Fprintf(sb, "%s\n\n", t.caption)
	}
	sb.WriteString("| " + strings.Join(t.header, " | ") + " |\n")
	seps := make([]string, len(t.header))
	for i := range seps {
		seps[i] = "---"
	}
	sb.WriteString("|" + strings.Join(seps, "|") + "|\n")
	for _, r := range t.rows {
		sb.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	sb.WriteString("\n")
}

func (r *report) targetTable() table {
	t := table{header: []string{"", "Target", "Wanted", "Measured", "Result"}}
	for _, s := range r.sections {
		for _, tg := range s.targets {
			t.add(s.id, tg.name, tg.want, tg.got, verdict(tg.pass))
		}
		if s.err != "" {
			t.add(s.id, "scenario", "", "error: "+s.err, "**error**")
		}
	}
	return t
}

func (r *report) markdown() string {
	var sb strings.Builder
	m := r.machine
	sb.WriteString("# Retention benchmarks\n\n")
	sb.WriteString("Written by `progressdb-bench` (`make bench`). Each figure is the median of " +
		"several repetitions (the range and count are shown next to it), each repetition " +
		"starts from an identical checkpoint of the scenario's seeded database, and every " +
		"target is a ratio of figures measured side by side in the same run. " +
		"`make bench-compare BASE=<rev>` compares B9 and B14 of two revisions (CONTRIBUTING.md).\n\n")
	fmt.Fprintf(&sb, "Command: `%s`\n\n", r.command)
	sb.WriteString("| Machine | |\n|---|---|\n")
	fmt.Fprintf(&sb, "| CPU | %d cores (GOMAXPROCS %d), %s |\n", m.cpus, m.gomaxprocs, m.cpuModel)
	fmt.Fprintf(&sb, "| Memory | %s |\n", m.memTotal)
	fmt.Fprintf(&sb, "| OS | %s, kernel %s |\n", m.osArch, m.kernel)
	fmt.Fprintf(&sb, "| Go | %s (cgo %s) |\n", m.goVersion, m.cgo)
	fmt.Fprintf(&sb, "| Pebble | %s |\n", m.pebble)
	fmt.Fprintf(&sb, "| Scale | %g |\n", r.scale)
	fmt.Fprintf(&sb, "| Run | %s to %s (%s) |\n", r.started.Format(time.RFC3339), r.finished.Format(time.RFC3339),
		r.finished.Sub(r.started).Round(time.Second))
	fmt.Fprintf(&sb, "| Load average (1/5/15 min) | %s at start, %s at end |\n\n", m.loadStart, r.loadEnd)

	sb.WriteString("## Targets\n\n")
	r.targetTable().markdown(&sb)

	for _, s := range r.sections {
		fmt.Fprintf(&sb, "## %s: %s\n\n", s.id, s.title)
		for _, p := range s.setup {
			sb.WriteString(p + "\n\n")
		}
		for _, t := range s.tables {
			t.markdown(&sb)
		}
		for _, p := range s.notes {
			sb.WriteString(p + "\n\n")
		}
		if s.err != "" {
			fmt.Fprintf(&sb, "The scenario stopped with an error: `%s`\n\n", s.err)
		}
		// The day and load of the section's own run, since a report merges
		// sections of several runs (-only).
		fmt.Fprintf(&sb, "_%s took %s, seeding included (run of %s", s.id, s.elapsed.Round(time.Second),
			r.started.Format(time.DateOnly))
		if s.load != "" {
			fmt.Fprintf(&sb, ", load average %s at its start", s.load)
		}
		sb.WriteString(")._\n\n")
	}
	return sb.String()
}

// console is the summary printed on stdout: every table, then the targets.
func (r *report) console() string {
	var sb strings.Builder
	for _, s := range r.sections {
		fmt.Fprintf(&sb, "\n== %s: %s ==\n\n", s.id, s.title)
		for _, t := range s.tables {
			t.markdown(&sb)
		}
	}
	sb.WriteString("== Targets ==\n\n")
	r.targetTable().markdown(&sb)
	return sb.String()
}

// merge returns the markdown of a run of some scenarios (-only) laid over
// old, an earlier report: the run's sections and target rows replace
// those of the same scenarios, the others stay as they were, in scenario
// order. The header describes this run; each section's last line names
// the day of its own run.
func (r *report) merge(old string) string {
	cur := r.markdown()
	oldHead, oldTargets, oldSecs := splitReport(old)
	oldDay := ""
	if _, after, ok := strings.Cut(oldHead, "| Run | "); ok && len(after) >= len(time.DateOnly) {
		oldDay = after[:len(time.DateOnly)]
	}
	head, targets, secs := splitReport(cur)
	ran := map[string]bool{}
	for _, s := range r.sections {
		ran[s.id] = true
	}
	for id, text := range oldSecs {
		if ran[id] {
			continue
		}
		if oldDay != "" && !strings.Contains(text, "(run of ") {
			text = strings.Replace(text, ", seeding included._", ", seeding included (run of "+oldDay+")._", 1)
		}
		secs[id] = text
	}
	for id, rows := range oldTargets {
		if !ran[id] {
			targets[id] = rows
		}
	}
	var sb strings.Builder
	sb.WriteString(head)
	sb.WriteString("## Targets\n\n")
	sb.WriteString("|  | Target | Wanted | Measured | Result |\n|---|---|---|---|---|\n")
	for _, sc := range scenarios {
		for _, row := range targets[sc.id] {
			sb.WriteString(row + "\n")
		}
	}
	sb.WriteString("\n")
	for _, sc := range scenarios {
		sb.WriteString(secs[sc.id])
	}
	return sb.String()
}

// splitReport cuts a report into its header (up to the targets), its
// target rows by scenario and its sections by scenario.
func splitReport(md string) (head string, targets map[string][]string, secs map[string]string) {
	targets, secs = map[string][]string{}, map[string]string{}
	before, rest, ok := strings.Cut(md, "## Targets\n")
	if !ok {
		return md, targets, secs
	}
	head = before
	table, body, _ := strings.Cut(rest, "\n## ")
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > 2 {
			if id := strings.TrimSpace(cells[1]); strings.HasPrefix(id, "B") {
				targets[id] = append(targets[id], line)
			}
		}
	}
	if body == "" {
		return head, targets, secs
	}
	for _, part := range strings.SplitAfter("## "+body, "\n## ") {
		part = strings.TrimSuffix(part, "## ")
		if !strings.HasPrefix(part, "## ") {
			part = "## " + part
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(part, "## "), ":")
		secs[id] = part
	}
	return head, targets, secs
}

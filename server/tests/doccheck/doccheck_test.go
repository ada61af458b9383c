package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// block is one fenced code block of a Markdown page.
type block struct {
	lang string // the fence's info string: "sh", "ts", ""
	text string
}

// repoRoot is the folder holding go.mod above the test's folder.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// readPage returns the text of a page given relative to the repository.
func readPage(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// blocks returns the fenced blocks of a page, in order.
func blocks(page string) []block {
	var out []block
	var cur *block
	var body []string
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, "```") {
			if cur != nil {
				body = append(body, l)
			}
			continue
		}
		if cur == nil {
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
			body = nil
			continue
		}
		cur.text = strings.Join(body, "\n") + "\n"
		out = append(out, *cur)
		cur = nil
	}
	return out
}

// section returns the blocks of a page from the heading that starts with
// heading to the next heading of its level or above (a "# " inside a
// block is a shell comment, not a heading).
func section(t *testing.T, page, heading string) []block {
	t.Helper()
	level := len(strings.SplitN(heading, " ", 2)[0])
	lines := strings.Split(page, "\n")
	var in []string
	found, fenced := false, false
	for _, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "#") {
			hashes := len(l) - len(strings.TrimLeft(l, "#"))
			if found && hashes <= level && strings.HasPrefix(l[hashes:], " ") {
				break
			}
			if strings.HasPrefix(l, heading) {
				found = true
			}
		}
		if found {
			in = append(in, l)
		}
	}
	if !found {
		t.Fatalf("no heading %q", heading)
	}
	return blocks(strings.Join(in, "\n"))
}

// pages lists the Markdown pages a reader follows: README, CONTRIBUTING,
// docs/ and the clients'.
func pages(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	out := []string{"README.md", "CONTRIBUTING.md"}
	for _, glob := range []string{"docs/*.md", "clients/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
	}
	return out
}

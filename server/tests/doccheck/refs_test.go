package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var docRef = regexp.MustCompile(`docs/[A-Za-z0-9_-]+\.md`)

// Every page a page names exists.
func TestDocReferencesExist(t *testing.T) {
	root := repoRoot(t)
	for _, p := range pages(t) {
		for _, ref := range docRef.FindAllString(readPage(t, p), -1) {
			if _, err := os.Stat(filepath.Join(root, ref)); err != nil {
				t.Errorf("%s names %s, which does not exist", p, ref)
			}
		}
	}
}

// Subject erasure (spec §12: an author's content, on request) and the
// erase step (docs/erasure.md: purged bytes leave the files) are two
// things: a paragraph about the first sends readers to its own page.
func TestSubjectErasureParagraphsNameItsPage(t *testing.T) {
	for _, p := range pages(t) {
		for _, para := range strings.Split(readPage(t, p), "\n\n") {
			if !strings.Contains(strings.ToLower(para), "subject erasure") {
				continue
			}
			if strings.Contains(para, "docs/erasure.md") && !strings.Contains(para, "docs/subject-erasure.md") {
				t.Errorf("%s: a paragraph on subject erasure names docs/erasure.md (the erase step), not docs/subject-erasure.md:\n%s", p, para)
			}
		}
	}
}

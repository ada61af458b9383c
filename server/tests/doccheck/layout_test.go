package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeLayoutNamesEveryPackage: README's Layout is the map of the
// repository, one line a package; a package added without its line, or a
// line left behind by a package that moved, makes the map lie.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	root := repoRoot(t)
	readme := readPage(t, "README.md")
	start := strings.Index(readme, "## Layout\n")
	if start < 0 {
		t.Fatal("README.md has no Layout section")
	}
	var text string
	for _, b := range blocks(readme[start:]) {
		text = b.text
		break
	}
	named := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		path := strings.TrimSuffix(f[0], "/")
		named[path] = true
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			t.Errorf("Layout names %s, which does not exist", f[0])
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if rel != "." && !named[filepath.ToSlash(rel)] {
			t.Errorf("Layout does not name the package in %s/", filepath.ToSlash(rel))
			named[filepath.ToSlash(rel)] = true // once
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEveryPackageHasAComment: a package's comment says what it holds;
// go doc and the Layout's one line are read from it.
func TestEveryPackageHasAComment(t *testing.T) {
	root := repoRoot(t)
	commented := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		dir := filepath.Dir(p)
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		commented[dir] = commented[dir] || f.Doc != nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, ok := range commented {
		if !ok {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("the package in %s/ has no package comment", filepath.ToSlash(rel))
		}
	}
}

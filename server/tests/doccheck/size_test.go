package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Limits of the project's code style: a file a reader can hold, a function
// that does one thing, and a CLI command that only parses, calls and prints
// (its work lives in the package that owns the domain).
const (
	maxFileLines    = 700
	maxFuncLines    = 150
	maxCommandLines = 80
)

// TestCodeSizeLimits names each non-test, non-generated Go file over
// maxFileLines, each function over maxFuncLines (the benchmark command
// aside), and each CLI command function over maxCommandLines.
func TestCodeSizeLimits(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	lines := func(n ast.Node) int {
		return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1
	}
	cliDir := filepath.Join(root, "server", "internal", "cli")
	benchDir := filepath.Join(root, "server", "cmd", "progressdb-bench")
	cliFuncs := map[string]*ast.FuncDecl{} // env methods of the CLI, by name
	var cliFiles []*ast.File
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
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it along its seams", rel, n, maxFileLines)
		}
		dir := filepath.Dir(p)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := lines(fn); n > maxFuncLines && dir != benchDir {
				t.Errorf("%s: func %s has %d lines, over %d", rel, fn.Name.Name, n, maxFuncLines)
			}
			if dir == cliDir && receiverIs(fn, "env") {
				cliFuncs[fn.Name.Name] = fn
			}
		}
		if dir == cliDir {
			cliFiles = append(cliFiles, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := commandFuncs(cliFiles)
	if len(names) == 0 {
		t.Fatal("found no command in server/internal/cli's commands(): has the registration changed?")
	}
	seen := map[string]bool{}
	for _, name := range names {
		fn, ok := cliFuncs[name]
		if !ok {
			continue
		}
		// A command that only hands over to a shared method
		// (policyGet → retentionPolicy) is measured by that method.
		if d, ok := cliFuncs[delegate(fn)]; ok {
			fn, name = d, d.Name.Name
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		if n := lines(fn); n > maxCommandLines {
			rel, _ := filepath.Rel(root, fset.Position(fn.Pos()).Filename)
			t.Errorf("%s: command func %s has %d lines, over %d: a command parses, calls and prints",
				filepath.ToSlash(rel), name, n, maxCommandLines)
		}
	}
}

// receiverIs reports whether fn is a method of the named type.
func receiverIs(fn *ast.FuncDecl, typ string) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return false
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.Name == typ
}

// commandFuncs returns the env methods commands() registers: the method
// expressions (env.retentionRun) and the methods its small adapters call
// (func(e env, ...) { return e.retentionPause(...) }).
func commandFuncs(files []*ast.File) []string {
	var names []string
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "commands" || fn.Recv != nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && (id.Name == "env" || id.Name == "e") {
					names = append(names, sel.Sel.Name)
				}
				return true
			})
		}
	}
	return names
}

// delegate returns the env method fn's body only returns a call of, or "".
func delegate(fn *ast.FuncDecl) string {
	if len(fn.Body.List) != 1 {
		return ""
	}
	ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
	if !ok || len(ret.Results) != 1 {
		return ""
	}
	call, ok := ret.Results[0].(*ast.CallExpr)
	if !ok {
		return ""
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "e" {
		return ""
	}
	return sel.Sel.Name
}

package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every write of the store goes through apply (commit.go): a write
// committed anywhere else skips the fence, the live-thread memory or the
// stripes' release. The package's own files are read, so a new direct
// write fails here rather than as a stale read in production.
func TestWritesGoThroughApply(t *testing.T) {
	// Batch methods that commit, and DB methods that write.
	commits := map[string]bool{"Commit": true, "Apply": true, "ApplyNoSyncWait": true, "SyncWait": true}
	dbWrites := map[string]bool{"Set": true, "Delete": true, "DeleteRange": true, "SingleDelete": true,
		"Merge": true, "LogData": true, "Ingest": true, "RangeKeySet": true, "RangeKeyUnset": true, "RangeKeyDelete": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "commit.go" {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			switch {
			case name == "forget":
				t.Errorf("%s: forget() outside apply", fset.Position(call.Pos()))
			case commits[name]:
				t.Errorf("%s: %s outside apply", fset.Position(call.Pos()), name)
			case dbWrites[name] && isDB(sel.X):
				t.Errorf("%s: a direct write to Pebble (%s) outside apply", fset.Position(call.Pos()), name)
			}
			return true
		})
	}
}

// isDB reports whether x names the store's Pebble handle (db, s.db, p.db).
func isDB(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "db"
	case *ast.SelectorExpr:
		return x.Sel.Name == "db"
	}
	return false
}

package config

import (
	"slices"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/suggest"
)

// Prefix is the prefix of every progressdb variable.
const Prefix = "PROGRESSDB_"

// Unknown is a PROGRESSDB_* variable that no setting reads: most likely a
// typo, which would otherwise leave the default in force without a word.
type Unknown struct {
	Var     string
	Suggest string // the known variable it most likely means, or ""
}

// UnknownVars returns the PROGRESSDB_* variables in environ that Config
// does not read, sorted, each with a suggestion when one is close. The
// known set comes from Config's env tags, so new settings are known as
// soon as they are added.
func UnknownVars(environ []string) []Unknown {
	var known []string
	eachVar(func(_, name string) { known = append(known, name) })
	var out []Unknown
	for name := range envMap(environ) {
		if !strings.HasPrefix(name, Prefix) || slices.Contains(known, name) {
			continue
		}
		out = append(out, Unknown{Var: name, Suggest: closest(name, known)})
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Var, b.Var) })
	return out
}

// closest returns the known name nearest to name: one that differs by a
// few edits, or by a missing or extra RETENTION_ group.
func closest(name string, known []string) string {
	best, bestDist := "", 4 // more than 3 edits is a different word
	ns := strings.TrimPrefix(name, Prefix)
	for _, k := range known {
		if ks := strings.TrimPrefix(k, Prefix); "RETENTION_"+ns == ks || "RETENTION_"+ks == ns {
			return k
		}
		if d := suggest.Distance(strings.ToUpper(name), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

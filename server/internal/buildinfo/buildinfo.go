// Package buildinfo tells which build of progressdb is running: the
// version and commit stamped by the Makefile, and the Go and Pebble
// versions recorded by the Go toolchain.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Set at link time by the Makefile:
//
//	-ldflags "-X github.com/progressdb/progressdb/server/internal/buildinfo.version=v1.2.3
//	          -X github.com/progressdb/progressdb/server/internal/buildinfo.commit=abc1234"
//
// They are link-time constants, never written at run time.
var (
	version string
	commit  string
)

// PebbleModule is the module path of the storage engine.
const PebbleModule = "github.com/cockroachdb/pebble/v2"

// Info describes one build.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	Pebble  string `json:"pebble"`
}

// Read returns the running binary's build information. Without the
// Makefile's stamps it falls back to what the toolchain recorded (module
// version, VCS revision), then to "dev" and "unknown".
func Read() Info {
	info := Info{Version: version, Commit: commit, Go: "unknown", Pebble: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		info.Go = bi.GoVersion
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == PebbleModule {
				info.Pebble = d.Version
				if d.Replace != nil {
					info.Pebble += " => " + strings.TrimSpace(d.Replace.Path+" "+d.Replace.Version)
				}
			}
		}
		if info.Commit == "" {
			info.Commit = vcsCommit(bi.Settings)
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// vcsCommit is the revision `go build` records when VCS stamping is on.
func vcsCommit(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}

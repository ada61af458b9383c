package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestReadFallsBackAndFindsPebble(t *testing.T) {
	info := Read()
	if info.Version == "" || info.Commit == "" {
		t.Fatalf("empty fields: %+v", info)
	}
	if info.Go != runtime.Version() {
		t.Errorf("Go = %q, want %q", info.Go, runtime.Version())
	}
	// Test binaries record their dependencies; this package's test does not
	// import Pebble, so it is reported as unknown here and found by the
	// command's own test.
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == PebbleModule && info.Pebble != d.Version {
				t.Errorf("Pebble = %q, want %q", info.Pebble, d.Version)
			}
		}
	}
}

func TestVCSCommit(t *testing.T) {
	got := vcsCommit([]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}})
	if got != "0123456789ab-dirty" {
		t.Errorf("vcsCommit = %q", got)
	}
	if got := vcsCommit(nil); got != "" {
		t.Errorf("vcsCommit(nil) = %q", got)
	}
}

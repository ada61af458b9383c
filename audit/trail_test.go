package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runsEvery writes n runs, step apart from fixedStart, and returns their
// paths in run order.
func runsEvery(t testing.TB, root string, n int, step time.Duration) []string {
	t.Helper()
	paths := make([]string, n)
	for i := range paths {
		paths[i] = writeRunAt(t, root, fmt.Sprintf("r%03d", i), fixedStart.Add(time.Duration(i)*step), Options{})
	}
	return paths
}

// copyTrail copies the trail at root, written once for cases that each
// attack a copy of their own, and returns the copy's root and the paths
// of runs within it.
func copyTrail(t testing.TB, root string, runs []string) (string, []string) {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	copied := make([]string, len(runs))
	for i, r := range runs {
		rel, err := filepath.Rel(root, r)
		if err != nil {
			t.Fatal(err)
		}
		copied[i] = filepath.Join(dst, rel)
	}
	return dst, copied
}

// headAt is the Head naming the sealed file at path.
func headAt(t testing.TB, root, path string) Head {
	t.Helper()
	_, runID, _ := ParseName(path)
	return HeadOf(root, path, runID, lastLineHash(t, path))
}

// putUnreadable puts an old sealed file that no reader of first and last
// lines can read (its one line is longer than MaxLineSize): a reader that
// opens it fails, so a reader that does not fail never opened it.
func putUnreadable(t testing.TB, root string) string {
	t.Helper()
	path := filepath.Join(root, "2024-01", "retention-20240101T000000Z-old.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	line := append(bytes.Repeat([]byte("x"), MaxLineSize+10), '\n')
	if err := os.WriteFile(path, line, 0o640); err != nil {
		t.Fatal(err)
	}
	return path
}

func runIDsOf(steps []Step) []string {
	var ids []string
	for _, st := range steps {
		ids = append(ids, st.Head.RunID)
	}
	return ids
}

func wantRunIDs(paths []string) []string {
	var ids []string
	for _, p := range paths {
		_, id, _ := ParseName(p)
		ids = append(ids, id)
	}
	return ids
}

// The readers anchored at a head (Steps, After) read the files after it and
// the writer's window before it, never the trail's older part: an old file
// no reader can read does not trouble them, while a reader of the whole
// trail meets it.
func TestAnchoredReadersReadOnlyAfterTheHead(t *testing.T) {
	root := t.TempDir()
	runs := runsEvery(t, root, 40, 36*time.Hour) // March to May
	putUnreadable(t, root)
	head := headAt(t, root, runs[29])
	steps, whole, err := Steps(root, head)
	if err != nil || !whole {
		t.Fatalf("Steps: whole %v, %v", whole, err)
	}
	if got, want := strings.Join(runIDsOf(steps), ","), strings.Join(wantRunIDs(runs[30:]), ","); got != want {
		t.Fatalf("Steps after %s: %s, want %s", head.RunID, got, want)
	}
	tr, err := After(root, head, nil)
	if err != nil || len(tr.Problems) != 0 || len(tr.Files) != 10 || len(tr.Unlinked) != 0 {
		t.Fatalf("After: %d files, %d unlinked, problems %v, %v", len(tr.Files), len(tr.Unlinked), tr.Problems, err)
	}
	if purged, ok, err := Pending(root, head, ""); err != nil || !ok || purged != 20 {
		t.Fatalf("Pending = %d, %v, %v; want 20 (2 a file)", purged, ok, err)
	}
	if _, _, err := Steps(root, Head{}); err == nil {
		t.Fatal("Steps from the zero head read past the unreadable file: the test proves nothing")
	}
}

// What keeps the part after the head from verifying is still caught by
// the anchored reader: a file after it deleted, edited or with its footer
// changed, the head file itself gone, or the head's whole folder gone.
func TestAnchoredReaderCatchesBreaksAfterTheHead(t *testing.T) {
	cases := []struct {
		name   string
		attack func(t *testing.T, root string, runs []string) (file, reason string)
		whole  bool // Steps, reading first and last lines only, sees no break
	}{
		{"file after the head deleted", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Remove(runs[22]); err != nil {
				t.Fatal(err)
			}
			return runs[23], "not linked from the head"
		}, false},
		{"newest file's predecessor deleted", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Remove(runs[28]); err != nil {
				t.Fatal(err)
			}
			return runs[29], "not linked from the head"
		}, false},
		{"item line of a file after the head edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[21], replaceIn(2, `"keys_deleted":12`, `"keys_deleted":13`))
			return runs[21], "line changed"
		}, true},
		{"footer of a file after the head edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[21], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
			return runs[22], "not linked from the head"
		}, false},
		{"head file deleted", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Remove(runs[19]); err != nil {
				t.Fatal(err)
			}
			return runs[19], ErrHeadNotFound.Error()
		}, false},
		{"head file's footer edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[19], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
			return runs[19], ErrHeadNotFound.Error()
		}, false},
		{"head's month folder removed", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.RemoveAll(filepath.Dir(runs[19])); err != nil {
				t.Fatal(err)
			}
			return runs[19], ErrHeadNotFound.Error()
		}, false},
	}
	trail := t.TempDir()
	trailRuns := runsEvery(t, trail, 30, 36*time.Hour) // March and April
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, runs := copyTrail(t, trail, trailRuns)
			head := headAt(t, root, runs[19])
			if tr, err := After(root, head, nil); err != nil || len(tr.Problems) != 0 || len(tr.Files) != 10 {
				t.Fatalf("before the attack: %d files, problems %v, %v", len(tr.Files), tr.Problems, err)
			}
			file, reason := c.attack(t, root, runs)
			tr, err := After(root, head, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range tr.Problems {
				found = found || p.File == file && strings.Contains(p.Reason, reason)
			}
			if !found {
				t.Errorf("After: no problem on %s containing %q; problems %+v", file, reason, tr.Problems)
			}
			if _, whole, err := Steps(root, head); err != nil || whole != c.whole {
				t.Errorf("Steps: whole %v, want %v (%v)", whole, c.whole, err)
			}
		})
	}
}

// A run whose clock was set back carries a name before the head's, yet
// follows the head in the chain: the anchored reader finds it, within the
// window the writer trusts.
func TestAnchoredReaderFollowsAnEarlierName(t *testing.T) {
	root := t.TempDir()
	runs := runsEvery(t, root, 20, time.Hour)
	head := headAt(t, root, runs[19])
	back := writeRunAt(t, root, "back", fixedStart.Add(10*time.Hour+30*time.Minute), Options{})
	next := writeRunAt(t, root, "next", fixedStart.Add(21*time.Hour), Options{})
	tr, err := After(root, head, nil)
	if err != nil || len(tr.Problems) != 0 {
		t.Fatalf("After: problems %v, %v", tr.Problems, err)
	}
	if len(tr.Files) != 2 || tr.Files[0].Path != back || tr.Files[1].Path != next {
		t.Fatalf("After: %+v, want %s then %s", tr.Files, back, next)
	}
	if cur, err := CurrentHead(root); err != nil || cur.RunID != "next" {
		t.Fatalf("CurrentHead = %+v, %v; want run next", cur, err)
	}
}

// verify --since checks from a run on: every tamper class the whole check
// finds in the part it covers, and a break in its link to the part
// before; the trail's older part is never read.
func TestVerifySince(t *testing.T) {
	// 20 runs an hour apart from 02:00 (more than the writer's window before
	// the check's start, so the unreadable old file lies beyond it); the
	// check starts at r017 (19:00).
	cases := []struct {
		name   string
		attack func(t *testing.T, root string, runs []string) (file, reason string)
	}{
		{"footer of the file before edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[16], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
			return runs[17], "matches no sealed file"
		}},
		{"file before deleted", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Remove(runs[16]); err != nil {
				t.Fatal(err)
			}
			return runs[17], "a file was deleted"
		}},
		{"footer of the first checked file edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[17], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
			return runs[17], "last line changed"
		}},
		{"file after deleted", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Remove(runs[18]); err != nil {
				t.Fatal(err)
			}
			return runs[19], "a file was deleted"
		}},
		{"item line edited", func(t *testing.T, root string, runs []string) (string, string) {
			mutate(t, runs[18], replaceIn(2, `"keys_deleted":12`, `"keys_deleted":13`))
			return runs[18], "line changed"
		}},
		{"file copied under another run's name", func(t *testing.T, root string, runs []string) (string, string) {
			copied := filepath.Join(filepath.Dir(runs[0]), "retention-20250301T230000Z-zzz.jsonl")
			data, _ := os.ReadFile(runs[17])
			if err := os.WriteFile(copied, data, 0o640); err != nil {
				t.Fatal(err)
			}
			return copied, "file name does not match its header"
		}},
		{"file renamed to another start time", func(t *testing.T, root string, runs []string) (string, string) {
			moved := strings.Replace(runs[19], "T210000Z", "T220000Z", 1)
			if err := os.Rename(runs[19], moved); err != nil {
				t.Fatal(err)
			}
			return moved, "file name does not match its header"
		}},
		{"file moved to another month", func(t *testing.T, root string, runs []string) (string, string) {
			moved := filepath.Join(root, "2025-04", filepath.Base(runs[19]))
			if err := os.Mkdir(filepath.Dir(moved), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(runs[19], moved); err != nil {
				t.Fatal(err)
			}
			return moved, "its run started in 2025-03"
		}},
		{"sealed file renamed to .inprogress", func(t *testing.T, root string, runs []string) (string, string) {
			if err := os.Rename(runs[18], runs[18]+suffixInProgress); err != nil {
				t.Fatal(err)
			}
			return runs[18] + suffixInProgress, "no live run holds the lease"
		}},
		{"sealed file renamed to .jsonl.corrupt", func(t *testing.T, root string, runs []string) (string, string) {
			corrupt := strings.TrimSuffix(runs[18], extSealed) + extCorrupt
			if err := os.Rename(runs[18], corrupt); err != nil {
				t.Fatal(err)
			}
			return corrupt, "set aside"
		}},
		{"newer chain restarted", func(t *testing.T, root string, runs []string) (string, string) {
			fresh := writeRunAt(t, t.TempDir(), "r019", fixedStart.Add(19*time.Hour), Options{})
			data, _ := os.ReadFile(fresh)
			if err := os.WriteFile(runs[19], data, 0o640); err != nil {
				t.Fatal(err)
			}
			return runs[19], "prev_file is empty"
		}},
		{"file that is not an audit file", func(t *testing.T, root string, runs []string) (string, string) {
			other := filepath.Join(root, "2025-03", "notes.txt")
			if err := os.WriteFile(other, []byte("x"), 0o640); err != nil {
				t.Fatal(err)
			}
			return other, "not an audit file"
		}},
		{"symbolic link named .jsonl", func(t *testing.T, root string, runs []string) (string, string) {
			link := filepath.Join(root, "2025-03", "retention-20250301T235900Z-l.jsonl")
			if err := os.Symlink(runs[0], link); err != nil {
				t.Fatal(err)
			}
			return link, "not a regular file"
		}},
	}
	// The trail is written once (20 runs of synced files) and each case
	// attacks a copy of its own.
	trail := t.TempDir()
	trailRuns := runsEvery(t, trail, 20, time.Hour)
	putUnreadable(t, trail)
	setup := func(t *testing.T) (string, []string) { return copyTrail(t, trail, trailRuns) }
	t.Run("clean", func(t *testing.T) {
		root, runs := setup(t)
		rep := verifyClean(t, root, VerifyOptions{Since: "r017"})
		if rep.Files != 3 || rep.Verified != 3 || rep.Since != runs[17] {
			t.Fatalf("report %+v, want 3 of 3 from %s", rep, runs[17])
		}
		if rep, err := VerifyDirWith(root, VerifyOptions{}); err != nil || len(rep.Problems) == 0 {
			t.Fatalf("the whole check does not see the unreadable old file: %+v %v", rep.Problems, err)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, runs := setup(t)
			file, reason := c.attack(t, root, runs)
			rep, err := VerifyDirWith(root, VerifyOptions{Since: "r017"})
			if err != nil {
				t.Fatal(err)
			}
			hasProblem(t, rep, file, reason)
			for _, p := range rep.Problems {
				if strings.HasSuffix(p.File, extSealed) && p.File < runs[17] || strings.Contains(p.File, "2024-01") {
					t.Errorf("problem before the check's start: %s", p.Error())
				}
			}
		})
	}
	t.Run("signature", func(t *testing.T) {
		pub, key := newKey(t)
		_, other := newKey(t)
		root := t.TempDir()
		for i := range 20 {
			k := key
			if i == 18 {
				k = other
			}
			writeRunAt(t, root, fmt.Sprintf("r%03d", i), fixedStart.Add(time.Duration(i)*time.Hour), Options{SigningKey: k})
		}
		rep, err := VerifyDirWith(root, VerifyOptions{Since: "r017", PublicKey: pub})
		if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Reason, "signature") {
			t.Fatalf("problems %+v, %v; want one bad signature", rep.Problems, err)
		}
	})
	t.Run("unknown run", func(t *testing.T) {
		root, _ := setup(t)
		if _, err := VerifyDirWith(root, VerifyOptions{Since: "nosuch"}); !errors.Is(err, ErrRunNotFound) {
			t.Fatalf("err %v, want ErrRunNotFound", err)
		}
		if _, err := VerifyDirWith(root, VerifyOptions{Since: "../x"}); !errors.Is(err, ErrInvalidRunID) {
			t.Fatalf("err %v, want ErrInvalidRunID", err)
		}
	})
	t.Run("shard trail", func(t *testing.T) {
		root := t.TempDir()
		shard := filepath.Join(root, ShardsDir, "3")
		runs := runsEvery(t, shard, 20, time.Hour)
		mutate(t, runs[16], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
		rep, err := VerifyDirWith(root, VerifyOptions{Since: "r017"})
		if err != nil {
			t.Fatal(err)
		}
		hasProblem(t, rep, runs[17], "matches no sealed file")
		if rep.Files != 3 {
			t.Fatalf("files %d, want 3", rep.Files)
		}
	})
}

// InProgress lists the newest folders, as far back as the writer's window:
// a crashed run's file there is found, one in a folder behind twenty
// sealed files is not listed (audit verify reports it).
func TestInProgressListsTheNewestFolders(t *testing.T) {
	root := t.TempDir()
	h := testHeader()
	h.StartedAt = fixedStart.AddDate(0, -2, 0)
	w, err := newWriter(root, "behind", h, stepClock(h.StartedAt, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	behind := w.Path()
	if err := w.f.Close(); err != nil {
		t.Fatal(err)
	}
	runsEvery(t, root, 20, time.Hour)
	crashed := abandonRun(t, root, "crashed", 2) // at fixedStart, among the newest
	got, err := InProgress(root)
	if err != nil || len(got) != 1 || got[0] != crashed {
		t.Fatalf("InProgress = %v, %v; want only %s", got, err, crashed)
	}
	rep, err := VerifyDirWith(root, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hasProblem(t, rep, behind, "no live run holds the lease")
}

// NewestRun remembers a settled folder's newest file and still follows
// every change to the folder: a run added, a newest file removed.
func TestNewestRunFollowsTheFolder(t *testing.T) {
	root := t.TempDir()
	a := writeRunAt(t, root, "a", fixedStart, Options{})
	dir := filepath.Dir(a)
	settle := func() {
		old := time.Now().Add(-time.Minute)
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
	}
	var c NewestRun
	want := func(path string) {
		t.Helper()
		for range 2 { // the first lists the folder, the second may remember it
			sum, err := c.LastRunOf(root, "")
			if err != nil || sum == nil || sum.Path != path {
				t.Fatalf("LastRun = %+v, %v; want %s", sum, err, path)
			}
		}
	}
	settle()
	want(a)
	b := writeRunAt(t, root, "b", fixedStart.Add(time.Hour), Options{})
	want(b)
	settle()
	want(b)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	want(a)
}

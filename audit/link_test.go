package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRunAt writes a complete run that started at start.
func writeRunAt(t testing.TB, root, runID string, start time.Time, o Options) string {
	t.Helper()
	h := testHeader()
	h.StartedAt = start
	w, err := newWriter(root, runID, h, stepClock(start, time.Millisecond))
	if err != nil {
		t.Fatalf("newWriter: %v", err)
	}
	w.key = o.SigningKey
	for _, it := range testItems() {
		if err := w.Item(it); err != nil {
			t.Fatal(err)
		}
	}
	path, err := w.Close(testFooter())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// threeRuns writes runs a, b and c an hour apart, in that order.
func threeRuns(t testing.TB, root string, o Options) [3]string {
	t.Helper()
	var paths [3]string
	for i, id := range []string{"a", "b", "c"} {
		paths[i] = writeRunAt(t, root, id, fixedStart.Add(time.Duration(i)*time.Hour), o)
	}
	return paths
}

func headerOf(t testing.TB, path string) Header {
	t.Helper()
	rec, reason := parseLine(fileLines(t, path)[0])
	if reason != "" || rec.Header == nil {
		t.Fatalf("%s: no header: %s", path, reason)
	}
	return *rec.Header
}

func lastLineHash(t testing.TB, path string) string {
	t.Helper()
	lines := fileLines(t, path)
	return lineHash(lines[len(lines)-1])
}

// verifyClean fails unless the tree under root verifies without problems.
func verifyClean(t testing.TB, root string, o VerifyOptions) Report {
	t.Helper()
	rep, err := VerifyDirWith(root, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Errorf("problem: %s", p.Error())
	}
	return rep
}

// hasProblem fails unless rep names file with a reason containing reason.
func hasProblem(t testing.TB, rep Report, file, reason string) {
	t.Helper()
	for _, p := range rep.Problems {
		if p.File == file && strings.Contains(p.Reason, reason) {
			return
		}
	}
	t.Errorf("no problem on %s containing %q; problems: %+v", file, reason, rep.Problems)
}

func TestFilesChain(t *testing.T) {
	root := t.TempDir()
	runs := threeRuns(t, root, Options{})
	if p := headerOf(t, runs[0]).PrevFile; p == nil || *p != "" {
		t.Errorf("first file's prev_file = %v, want \"\"", p)
	}
	for i := 1; i < 3; i++ {
		if p := headerOf(t, runs[i]).PrevFile; p == nil || *p != lastLineHash(t, runs[i-1]) {
			t.Errorf("file %d's prev_file = %v, want the hash of the footer of %s", i, p, runs[i-1])
		}
	}
	if rep := verifyClean(t, root, VerifyOptions{}); rep.Verified != 3 {
		t.Errorf("verified %d, want 3", rep.Verified)
	}
}

// The writer follows run order, not names: a run whose clock is behind
// (another host sharing the folder) still follows the run before it, and
// the chain crosses month folders and files sealed after a crash.
func TestCreateFindsThePreviousFile(t *testing.T) {
	root := t.TempDir()
	a := writeRunAt(t, root, "a", fixedStart, Options{})
	b := writeRunAt(t, root, "b", fixedStart.Add(-5*time.Minute), Options{}) // clock behind
	abandonRun(t, root, "c", 2)                                              // crashed
	sealed, err := SealAbandoned(root, sealNow)
	if err != nil || len(sealed) != 1 {
		t.Fatalf("SealAbandoned = %v, %v", sealed, err)
	}
	d := writeRunAt(t, root, "d", fixedStart.AddDate(0, 1, 0), Options{}) // next month
	for _, pair := range [][2]string{{a, b}, {b, sealed[0]}, {sealed[0], d}} {
		if p := headerOf(t, pair[1]).PrevFile; p == nil || *p != lastLineHash(t, pair[0]) {
			t.Errorf("%s does not follow %s", pair[1], pair[0])
		}
	}
	verifyClean(t, root, VerifyOptions{})
}

// A tree that starts with files written before prev_file existed verifies;
// the first new file follows the last old one.
func TestLegacyFilesThenChain(t *testing.T) {
	root := t.TempDir()
	legacy := copyLegacy(t, root)
	next := writeRunAt(t, root, "next", fixedStart.Add(time.Hour), Options{})
	if p := headerOf(t, next).PrevFile; p == nil || *p != lastLineHash(t, legacy) {
		t.Fatalf("the first chained file does not follow the legacy one")
	}
	verifyClean(t, root, VerifyOptions{})
}

// copyLegacy puts the committed file written before prev_file existed into
// root and returns its path.
func copyLegacy(t testing.TB, root string) string {
	t.Helper()
	name := filepath.Join("2025-03", "retention-20250301T020000Z-golden.jsonl")
	data, err := os.ReadFile(filepath.Join("..", "testdata", "audit-legacy", name))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("prev_file")) {
		t.Fatal("the legacy fixture carries prev_file")
	}
	path := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each attack on a verified tree of three runs must be reported.
func TestVerifyDetectsTamperingAcrossFiles(t *testing.T) {
	cases := []struct {
		name   string
		attack func(t *testing.T, root string, runs [3]string) (file, reason string)
	}{
		{"footer of an older file edited", func(t *testing.T, root string, runs [3]string) (string, string) {
			mutate(t, runs[0], replaceIn(7, `"status":"completed"`, `"status":"interrupted"`))
			return runs[1], "matches no sealed file"
		}},
		{"footer duration of the middle file edited", func(t *testing.T, root string, runs [3]string) (string, string) {
			mutate(t, runs[1], replaceIn(7, `"duration_ms":3000`, `"duration_ms":2999`))
			return runs[2], "matches no sealed file"
		}},
		{"file deleted", func(t *testing.T, root string, runs [3]string) (string, string) {
			if err := os.Remove(runs[1]); err != nil {
				t.Fatal(err)
			}
			return runs[2], "a file was deleted"
		}},
		{"file copied under another run's name", func(t *testing.T, root string, runs [3]string) (string, string) {
			copied := filepath.Join(filepath.Dir(runs[0]), "retention-20250301T020000Z-zzz.jsonl")
			data, _ := os.ReadFile(runs[0])
			if err := os.WriteFile(copied, data, 0o640); err != nil {
				t.Fatal(err)
			}
			return copied, "file name does not match its header"
		}},
		{"file renamed to another start time", func(t *testing.T, root string, runs [3]string) (string, string) {
			moved := strings.Replace(runs[2], "T040000Z", "T050000Z", 1)
			if err := os.Rename(runs[2], moved); err != nil {
				t.Fatal(err)
			}
			return moved, "file name does not match its header"
		}},
		{"file moved to another month", func(t *testing.T, root string, runs [3]string) (string, string) {
			dir := filepath.Join(root, "2025-04")
			moved := filepath.Join(dir, filepath.Base(runs[2]))
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(runs[2], moved); err != nil {
				t.Fatal(err)
			}
			return moved, "its run started in 2025-03"
		}},
		{"sealed file renamed to .inprogress", func(t *testing.T, root string, runs [3]string) (string, string) {
			if err := os.Rename(runs[1], runs[1]+suffixInProgress); err != nil {
				t.Fatal(err)
			}
			return runs[1] + suffixInProgress, "no live run holds the lease"
		}},
		{"sealed file renamed to .jsonl.corrupt", func(t *testing.T, root string, runs [3]string) (string, string) {
			corrupt := strings.TrimSuffix(runs[1], extSealed) + extCorrupt
			if err := os.Rename(runs[1], corrupt); err != nil {
				t.Fatal(err)
			}
			return corrupt, "set aside"
		}},
		{"newer chain restarted", func(t *testing.T, root string, runs [3]string) (string, string) {
			// The last file rewritten as if it were the first: its own
			// chain is consistent, the link to its predecessor is not.
			if err := os.Remove(runs[2]); err != nil {
				t.Fatal(err)
			}
			other := t.TempDir()
			fresh := writeRunAt(t, other, "c", fixedStart.Add(2*time.Hour), Options{})
			data, _ := os.ReadFile(fresh)
			if err := os.WriteFile(runs[2], data, 0o640); err != nil {
				t.Fatal(err)
			}
			return runs[2], "prev_file is empty"
		}},
		{"file without prev_file copied in after the chain began", func(t *testing.T, root string, runs [3]string) (string, string) {
			legacy := copyLegacy(t, root) // starts at 02:00, as run a does
			return legacy, "has no prev_file"
		}},
		{"file that is not an audit file", func(t *testing.T, root string, runs [3]string) (string, string) {
			other := filepath.Join(root, "2025-03", "notes.txt")
			if err := os.WriteFile(other, []byte("x"), 0o640); err != nil {
				t.Fatal(err)
			}
			return other, "not an audit file"
		}},
		{"symbolic link named .jsonl", func(t *testing.T, root string, runs [3]string) (string, string) {
			link := filepath.Join(root, "2025-03", "retention-20250301T050000Z-l.jsonl")
			if err := os.Symlink(runs[0], link); err != nil {
				t.Fatal(err)
			}
			return link, "not a regular file"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			runs := threeRuns(t, root, Options{})
			verifyClean(t, root, VerifyOptions{})
			file, reason := c.attack(t, root, runs)
			rep, err := VerifyDirWith(root, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hasProblem(t, rep, file, reason)
		})
	}
}

// An older file's footer edited in an unsigned tree: its own lines still
// chain, so only the link from the next file shows the change. The report
// names the edited file itself, at its footer, as well as the next file,
// and counts neither as verified.
func TestVerifyNamesTheFileWhoseFooterWasEdited(t *testing.T) {
	for edited := range 2 {
		t.Run(fmt.Sprintf("file %d of 3", edited+1), func(t *testing.T) {
			root := t.TempDir()
			runs := threeRuns(t, root, Options{})
			verifyClean(t, root, VerifyOptions{})
			mutate(t, runs[edited], replaceIn(7, `"status":"completed"`, `"status":"failed"`))
			rep, err := VerifyDirWith(root, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hasProblem(t, rep, runs[edited], "last line changed")
			hasProblem(t, rep, runs[edited+1], "matches no sealed file")
			for _, p := range rep.Problems {
				if p.File == runs[edited] && p.Line != 7 {
					t.Errorf("problem on the edited file at line %d, want 7 (its footer): %s", p.Line, p.Reason)
				}
			}
			if len(rep.Problems) != 2 || rep.Files != 3 || rep.Verified != 1 {
				t.Errorf("files %d, verified %d, problems %+v; want 3 files, 1 verified, 2 problems",
					rep.Files, rep.Verified, rep.Problems)
			}
		})
	}
}

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestSignedFooters(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	root := t.TempDir()
	runs := threeRuns(t, root, Options{SigningKey: priv})
	abandonRun(t, root, "d", 1)
	sealed, err := SealAbandonedWith(root, sealNow, Options{SigningKey: priv})
	if err != nil || len(sealed) != 1 {
		t.Fatalf("SealAbandonedWith = %v, %v", sealed, err)
	}
	verifyClean(t, root, VerifyOptions{PublicKey: pub})

	rep, _ := VerifyDirWith(root, VerifyOptions{PublicKey: otherPub})
	hasProblem(t, rep, runs[0], "does not verify with the public key")

	// A newest footer rewritten (status, counts, time) by someone without
	// the key: the chain cannot show it, the signature does.
	newest := sealed[0]
	mutate(t, newest, func(lines [][]byte) [][]byte {
		n := len(lines) - 1
		lines[n] = bytes.Replace(lines[n], []byte(`"status":"aborted"`), []byte(`"status":"completed"`), 1)
		return lines
	})
	rep, _ = VerifyDirWith(root, VerifyOptions{PublicKey: pub})
	hasProblem(t, rep, newest, "does not verify")

	// A forged file: written and signed with another key.
	forged := writeRunAt(t, root, "e", fixedStart.Add(5*time.Hour), Options{SigningKey: otherPriv})
	rep, _ = VerifyDirWith(root, VerifyOptions{PublicKey: pub})
	hasProblem(t, rep, forged, "does not verify")

	// An unsigned file, when a key is given.
	unsigned := writeRunAt(t, root, "f", fixedStart.Add(6*time.Hour), Options{})
	rep, _ = VerifyDirWith(root, VerifyOptions{PublicKey: pub})
	hasProblem(t, rep, unsigned, "not signed")
}

func TestSignatureMessage(t *testing.T) {
	_, priv := newKey(t)
	line, err := encodeFooter(fixedStart, "r", 3, "abc", testFooter(), priv)
	if err != nil {
		t.Fatal(err)
	}
	rec, reason := parseLine(line)
	if reason != "" || rec.Footer == nil || rec.Footer.Signature == "" {
		t.Fatalf("signed footer: %s %+v", reason, rec.Footer)
	}
	unsigned, err := encodeFooter(fixedStart, "r", 3, "abc", testFooter(), nil)
	if err != nil {
		t.Fatal(err)
	}
	msg, ok := SignatureMessage(line, rec.Footer.Signature)
	if !ok || string(msg) != lineHash(unsigned) {
		t.Fatalf("SignatureMessage = %s, %t; want the hash of the unsigned line", msg, ok)
	}
}

func TestLoadKeys(t *testing.T) {
	pub, priv := newKey(t)
	dir := t.TempDir()
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	privPath := filepath.Join(dir, "audit.key")
	writePEM(t, privPath, "PRIVATE KEY", der)
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pubPath := filepath.Join(dir, "audit.pub")
	writePEM(t, pubPath, "PUBLIC KEY", pubDER)

	got, err := LoadSigningKey(privPath)
	if err != nil || !got.Equal(priv) {
		t.Fatalf("LoadSigningKey = %v", err)
	}
	for _, p := range []string{pubPath, privPath} {
		gotPub, err := LoadPublicKey(p)
		if err != nil || !gotPub.Equal(pub) {
			t.Fatalf("LoadPublicKey(%s) = %v", p, err)
		}
	}
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{garbage, pubPath} {
		if _, err := LoadSigningKey(p); !errors.Is(err, ErrBadKey) {
			t.Errorf("LoadSigningKey(%s) = %v, want ErrBadKey", p, err)
		}
	}
	if _, err := LoadSigningKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadSigningKey of a missing file succeeded")
	}
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Many runs within one second (names then sort by run ID, not run order),
// more than the writer's window: each still follows the one before.
func TestChainWithManyRunsInOneSecond(t *testing.T) {
	root := t.TempDir()
	n := tailWindow + 8
	var prev string
	for i := range n {
		id := fmt.Sprintf("r%02d", n-i) // later runs sort first
		path := writeRunAt(t, root, id, fixedStart.Add(time.Duration(i)*time.Millisecond), Options{})
		if prev != "" {
			if p := headerOf(t, path).PrevFile; p == nil || *p != lastLineHash(t, prev) {
				t.Fatalf("run %d does not follow run %d", i, i-1)
			}
		}
		prev = path
	}
	verifyClean(t, root, VerifyOptions{})
}

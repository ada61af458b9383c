package audit

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReader feeds arbitrary bytes to the reader and the verifier, as a
// stream and as a file: they must never panic, and every failure must be a
// Problem naming a line that exists.
func FuzzReader(f *testing.F) {
	f.Add(goldenBytes(f))
	dir := f.TempDir() // one folder for all inputs: fuzzing wants cheap runs
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		r := NewReader(bytes.NewReader(data), "fuzz")
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				assertFuzzProblem(t, err, lines)
				continue
			}
			kinds := 0
			for _, set := range []bool{rec.Header != nil, rec.Item != nil, rec.Footer != nil} {
				if set {
					kinds++
				}
			}
			if kinds != 1 || rec.Line < 1 || rec.Line > lines || len(rec.Raw) > MaxLineSize {
				t.Fatalf("record at line %d carries %d decoded kinds, %d raw bytes", rec.Line, kinds, len(rec.Raw))
			}
		}
		if _, err := verify(NewReader(bytes.NewReader(data), "fuzz"), "fuzz", nil); err != nil {
			assertFuzzProblem(t, err, lines)
		}

		file, err := os.CreateTemp(dir, "*.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(file.Name())
		_, err = file.Write(data)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyFile(file.Name()); err != nil {
			assertFuzzProblem(t, err, lines)
		}
	})
}

// FuzzVerify changes one byte of a valid file and may cut its end. The
// unchanged file always verifies; a changed byte on any line but the last
// (which the chain covers), or a cut, never does.
func FuzzVerify(f *testing.F) {
	valid := goldenBytes(f)
	lastLineStart := bytes.LastIndexByte(valid[:len(valid)-1], '\n') + 1
	f.Add(uint32(0), byte('{'), uint32(0)) // no change
	f.Fuzz(func(t *testing.T, pos uint32, value byte, cut uint32) {
		data := bytes.Clone(valid)
		at := int(pos % uint32(len(data)))
		data[at] = value
		data = data[:len(data)-int(cut%uint32(len(data)))]

		_, err := verify(NewReader(bytes.NewReader(data), "fuzz"), "fuzz", nil)
		if err != nil {
			assertFuzzProblem(t, err, bytes.Count(data, []byte("\n"))+1)
		}
		changed := valid[at] != value
		switch {
		case bytes.Equal(data, valid) && err != nil:
			t.Fatalf("the valid file does not verify: %v", err)
		case len(data) < len(valid) && err == nil:
			t.Fatalf("a file cut to %d of %d bytes verifies", len(data), len(valid))
		case changed && at < lastLineStart && err == nil:
			t.Fatalf("byte %d changed to %q, before the last line, and the file still verifies", at, value)
		}
	})
}

// FuzzSeal seals arbitrary bytes left as a file in progress: SealAbandoned
// never panics, never loses a file that holds anything (an empty one, a
// run killed before its header, is removed), and a file it completes with
// a footer of its own verifies.
func FuzzSeal(f *testing.F) {
	f.Add(goldenBytes(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "2025-03")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(dir, "retention-20250301T020000Z-f")
		if err := os.WriteFile(base+extInProgress, data, 0o640); err != nil {
			t.Fatal(err)
		}
		sealed, err := SealAbandoned(root, sealNow)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || len(sealed) != 0 {
				t.Fatalf("SealAbandoned = %v, %v", sealed, err)
			}
			kept, rerr := os.ReadFile(base + extCorrupt)
			if rerr != nil || !bytes.Equal(kept, data) {
				t.Fatalf("a file set aside was changed or lost: %v", rerr)
			}
			return
		}
		if len(data) == 0 {
			if _, err := os.Stat(base + extInProgress); len(sealed) != 0 || !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("empty file: sealed %v, still there: %v", sealed, err)
			}
			return
		}
		if len(sealed) != 1 || sealed[0] != base+extSealed {
			t.Fatalf("sealed = %v", sealed)
		}
		out, err := os.ReadFile(sealed[0])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.HasPrefix(data, out) {
			return // only a torn tail cut off: the file had its own footer
		}
		if err := VerifyFile(sealed[0]); err != nil {
			t.Fatalf("a file sealed with an aborted footer does not verify: %v", err)
		}
	})
}

func assertFuzzProblem(t *testing.T, err error, lines int) {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error is not a Problem: %v", err)
	}
	if p.Line < 0 || p.Line > lines {
		t.Fatalf("problem names line %d of %d: %v", p.Line, lines, err)
	}
}

package attachments

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// A replica's blob folder follows the effects: chunks written at their
// offsets, the commit moving the complete file into place, a deletion;
// each applied twice changes nothing more (a replica killed between an
// effect and its batch applies it again).
func TestReplicaEffectsAreIdempotent(t *testing.T) {
	dir := t.TempDir()
	fx := ReplicaEffects(dir, nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	const name = "t1/m1/01ABC"
	temp := name + ".0011223344556677.tmp"
	apply := func(e blobEffect) {
		t.Helper()
		for range 2 {
			if err := fx(ctx, e.encode()); err != nil {
				t.Fatalf("apply %+v: %v", e.op, err)
			}
		}
	}
	data := bytes.Repeat([]byte("0123456789"), 30)
	apply(blobEffect{op: opChunk, name: temp, off: 0, data: data[:100]})
	apply(blobEffect{op: opChunk, name: temp, off: 100, data: data[100:]})
	apply(blobEffect{op: opCommit, name: temp, off: int64(len(data)), to: name})
	if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the blob: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, temp)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is left: %v", err)
	}
	// Sent again (a snapshot was taken during the upload): a replica
	// whose blob is in place writes nothing.
	apply(blobEffect{op: opChunk, name: temp, off: 0, data: data[:100]})
	apply(blobEffect{op: opCommit, name: temp, off: int64(len(data)), to: name})
	if _, err := os.Stat(filepath.Join(dir, temp)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a chunk sent again left a temporary file: %v", err)
	}
	apply(blobEffect{op: opDelete, name: name})
	if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the deleted blob is there: %v", err)
	}

	// An empty file has no chunk: its commit makes it.
	const empty = "t1/m1/01EMPTY"
	apply(blobEffect{op: opCommit, name: empty + ".00.tmp", to: empty})
	if info, err := os.Stat(filepath.Join(dir, empty)); err != nil || info.Size() != 0 {
		t.Fatalf("the empty blob: %v, %v", info, err)
	}
}

// A replica that lacks an upload's first bytes (restored from a
// snapshot while the upload went on) writes no hole and moves no
// incomplete file into place: the blob is missing there, not wrong.
func TestReplicaEffectsLeaveNoHole(t *testing.T) {
	dir := t.TempDir()
	fx := ReplicaEffects(dir, nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	const name = "t1/m1/01ABC"
	temp := name + ".aa.tmp"
	for _, e := range []blobEffect{
		{op: opChunk, name: temp, off: 100, data: []byte("late")},
		{op: opCommit, name: temp, off: 104, to: name},
	} {
		if err := fx(ctx, e.encode()); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{name, temp} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// An effect that does not decode, or names anything but an attachment's
// blob or its temporary file, is refused and touches nothing.
func TestReplicaEffectsRefuseOtherNames(t *testing.T) {
	dir := t.TempDir()
	fx := ReplicaEffects(dir, nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	for _, e := range []blobEffect{
		{op: opChunk, name: "../../etc/x", data: []byte("x")},
		{op: opChunk, name: "t1/m1/01ABC", data: []byte("x")}, // a blob, not a temporary file
		{op: opCommit, name: "t1/m1/01ABC.aa.tmp", to: "t1/m1/01OTHER"},
		{op: opDelete, name: "t1/m1"},
		{op: 9, name: "t1/m1/01ABC"},
	} {
		if err := fx(ctx, e.encode()); !errors.Is(err, ErrEffect) {
			t.Errorf("%+v: %v", e, err)
		}
	}
	for _, raw := range [][]byte{nil, {opChunk}, {opChunk, 200}} {
		if err := fx(ctx, raw); !errors.Is(err, ErrEffect) {
			t.Errorf("%v: %v", raw, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused effects wrote %v", entries)
	}
}

// A snapshot's blobs join the folder where they are missing; a blob
// already there stays as it is, and nothing is left beside the folder.
func TestAdoptBlobsFillsWhatIsMissing(t *testing.T) {
	root := t.TempDir()
	dir, staged := filepath.Join(root, "blobs"), filepath.Join(root, "blobs.snapshot")
	write := func(p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "t1/m1/01OLD"), "mine")
	write(filepath.Join(staged, "t1/m1/01OLD"), "theirs")
	write(filepath.Join(staged, "t2/m1/01NEW"), "new")
	moved, err := AdoptBlobs(staged, dir)
	if err != nil || moved != 1 {
		t.Fatalf("AdoptBlobs: %d, %v", moved, err)
	}
	for p, want := range map[string]string{"t1/m1/01OLD": "mine", "t2/m1/01NEW": "new"} {
		if got, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v", p, got, err)
		}
	}
	if _, err := os.Stat(staged); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unpacked blobs are left: %v", err)
	}
	if moved, err := AdoptBlobs(staged, dir); err != nil || moved != 0 {
		t.Errorf("AdoptBlobs of nothing: %d, %v", moved, err)
	}
}

package backup

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrNotEmpty: a restore's database folder exists and holds something.
var ErrNotEmpty = errors.New("the database folder is not empty")

// CheckEmpty returns nil when dir is absent or an empty folder, and an
// error wrapping ErrNotEmpty otherwise. It changes nothing.
func CheckEmpty(dir string) error {
	info, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s: %w (it is a file)", dir, ErrNotEmpty)
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if names, err := f.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("%s: %w", dir, ErrNotEmpty)
	} else if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Extract verifies the backup at path while it unpacks it into dir, which
// must be absent or empty (ErrNotEmpty, nothing touched). Until every file
// is in place and synced, dir holds store.RestoreMarker, so a restore cut
// short is never opened as a database. A backup that does not verify
// leaves dir as it found it; the report names what failed. The copy keeps
// the backup's identity: a cluster shard's move, whose old copy goes. A
// file:// store's blobs go into the folder beside dir
// (config.DefaultAttachmentsDir).
func Extract(ctx context.Context, path, dir string, pub ed25519.PublicKey) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{File: path}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return extract(ctx, path, f, into{db: dir, blobs: config.DefaultAttachmentsDir(dir)}, pub, nil)
}

// ExtractReader is Extract of the archive read from r, which name
// names (a replica's snapshot: its leader's stream). A file:// store's
// blobs go into the folder blobs ("": checked and dropped); its key
// store goes into ksDir, absent or empty like dir and made only when the
// archive holds one ("": an archive holding one does not verify).
func ExtractReader(ctx context.Context, name string, r io.Reader, dir, ksDir, blobs string, pub ed25519.PublicKey) (Report, error) {
	return extract(ctx, name, r, into{db: dir, keys: ksDir, blobs: blobs}, pub, nil)
}

// ExtractPending is Extract for a restore whose replay is still to come
// (spec §10.1): once every file is in place, dir's marker moves to state
// replaying with then's fields (and the backup's ID), so that nothing
// serves the copy until the replay finishes and store.FinishRestore
// removes the marker. A backup's key store goes into ksDir, which must be
// absent or empty like dir ("" when the restore has none: a backup that
// holds one then does not verify). A file:// store's blobs go into
// then.Attachments, or the folder beside dir.
func ExtractPending(ctx context.Context, path, dir, ksDir string, pub ed25519.PublicKey, then store.RestoreState) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{File: path}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return ExtractPendingReader(ctx, path, f, dir, ksDir, pub, then)
}

// ExtractPendingReader is ExtractPending of the archive read from r
// (standard input for `restore -`); name is what the report calls it.
func ExtractPendingReader(ctx context.Context, name string, r io.Reader, dir, ksDir string, pub ed25519.PublicKey, then store.RestoreState) (Report, error) {
	blobs := then.Attachments
	if blobs == "" {
		blobs = config.DefaultAttachmentsDir(dir)
	}
	return extract(ctx, name, r, into{db: dir, keys: ksDir, blobs: blobs}, pub, &then)
}

// into is where an archive is unpacked: the database, its key store (""
// when none may come), a file:// store's blobs ("" checks and drops them).
type into struct {
	db, keys, blobs string
}

// extract is Extract of the archive read from r, which path names.
func extract(ctx context.Context, path string, r io.Reader, to into, pub ed25519.PublicKey, then *store.RestoreState) (Report, error) {
	dir, ksDir := to.db, to.keys
	if err := CheckEmpty(dir); err != nil {
		return Report{File: path}, err
	}
	blobs := &blobFolder{dir: to.blobs}
	// The key store's folder is checked and made only when the backup
	// holds one: a plain backup's restore never looks at it (it may be a
	// live key store).
	ksMade, ksCreated := false, false
	keyDir := func() (string, error) {
		if ksDir == "" {
			return "", nil
		}
		if err := CheckEmpty(ksDir); err != nil {
			return "", err
		}
		if _, err := os.Stat(ksDir); errors.Is(err, os.ErrNotExist) {
			ksCreated = true
		}
		if err := os.MkdirAll(ksDir, 0o700); err != nil {
			return "", fmt.Errorf("backup: %w", err)
		}
		ksMade = true
		return ksDir, nil
	}
	created := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Report{File: path}, fmt.Errorf("backup: %w", err)
		}
		created = true
	}
	undone := false
	defer func() {
		if undone {
			blobs.undo()
		}
	}()
	undo := func() {
		undone = true
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
		if created {
			_ = os.Remove(dir)
		}
		if !ksMade {
			return
		}
		entries, _ = os.ReadDir(ksDir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(ksDir, e.Name()))
		}
		if ksCreated {
			_ = os.Remove(ksDir)
		}
	}
	if err := store.WriteRestoreState(dir, store.RestoreState{State: store.RestoreUnpacking, Backup: path}); err != nil {
		undo()
		return Report{File: path}, fmt.Errorf("backup: %w", err)
	}
	rep, err := unpack(ctx, path, r, dir, keyDir, blobs, pub)
	if err != nil || !rep.Valid {
		undo()
		return rep, err
	}
	if err := durable.SyncDir(dir); err != nil {
		return rep, err
	}
	if ksMade {
		if err := durable.SyncDir(ksDir); err != nil {
			return rep, err
		}
	}
	if err := blobs.sync(); err != nil {
		return rep, err
	}
	if then != nil {
		st := *then
		st.State, st.BackupID = store.RestoreReplaying, rep.Manifest.BackupID
		if ksMade {
			if st.KeyStore, err = filepath.Abs(ksDir); err != nil {
				return rep, fmt.Errorf("backup: %w", err)
			}
		}
		if st.Backup == "" {
			st.Backup = path
		}
		if st.Attachments, err = filepath.Abs(to.blobs); err != nil {
			return rep, fmt.Errorf("backup: %w", err)
		}
		return rep, store.WriteRestoreState(dir, st)
	}
	return rep, store.FinishRestore(dir)
}

// blobFolder is where an unpacking puts a file:// store's blobs: made at
// the first blob (0750, like the store's own folder), and on failure left
// as it was found. A nil one, or one without a folder, checks the blobs
// and drops them (verify).
type blobFolder struct {
	dir     string
	asked   bool
	created bool     // the folder did not exist
	written []string // the blobs written, in a folder that did
}

// target is the file blob name goes to, its folders made; "" to check it
// and drop it.
func (b *blobFolder) target(name string) (string, error) {
	if b == nil || b.dir == "" {
		return "", nil
	}
	if !b.asked {
		b.asked = true
		if _, err := os.Stat(b.dir); errors.Is(err, os.ErrNotExist) {
			b.created = true
		}
	}
	p := filepath.Join(b.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return "", fmt.Errorf("backup: %w", err)
	}
	if !b.created {
		// A blob of the same name (a restore forced over a folder) is
		// replaced: the archive's is the one its record describes.
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("backup: %w", err)
		}
		b.written = append(b.written, p)
	}
	return p, nil
}

// sync makes the blobs' folders durable (every file was synced).
func (b *blobFolder) sync() error {
	if !b.asked {
		return nil
	}
	return filepath.WalkDir(b.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return durable.SyncDir(p)
	})
}

func (b *blobFolder) undo() {
	switch {
	case !b.asked:
	case b.created:
		_ = os.RemoveAll(b.dir)
	default:
		for _, p := range b.written {
			_ = os.Remove(p)
		}
	}
}

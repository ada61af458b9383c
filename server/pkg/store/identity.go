package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// IdentityFile is a file in the database folder that repeats the
// database's identity (databaseIDKey) for processes that cannot open the
// database while another holds Pebble's lock: a command that finds the
// folder held reads it, and goes through the server at hand only when
// that server says it serves this identity (spec §10.1). The store
// writes it at every open and whenever the identity is recorded, so the
// process holding the folder wrote it.
const IdentityFile = ".progressdb-database-id"

// FolderDatabaseID returns the identity recorded in the database folder
// at path, "" when none is (a database that has no identity yet, or was
// last opened by a version without the file).
func FolderDatabaseID(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(path, IdentityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the database's identity: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recordIdentity writes the database's identity into its folder when it
// has one and the file says otherwise; written aside and renamed
// (durable), so a reader never sees half of it.
func (s *Store) recordIdentity(ctx context.Context) error {
	id, err := s.DatabaseID(ctx, false)
	if err != nil || id == "" {
		return err
	}
	if cur, err := FolderDatabaseID(s.path); err == nil && cur == id {
		return nil
	}
	if err := durable.WriteFile(filepath.Join(s.path, IdentityFile), []byte(id+"\n"), pebbledir.FileMode); err != nil {
		return fmt.Errorf("record the database's identity in its folder: %w", err)
	}
	return nil
}

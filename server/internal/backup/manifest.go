// Package backup makes, checks and restores backups of a progressdb
// database (spec §10): one tar stream holding manifest.json and a Pebble
// checkpoint taken while no retention run purges. Restoring one replays
// the purges the audit trail records after the backup's audit head
// (retention's replay source), so a restore never brings purged content
// back.
package backup

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// Archive layout: manifest.json first, then the checkpoint's files under
// db/, then, for a database with sealed content, the key store's checkpoint
// under keystore/, then a file:// attachments store's blobs under
// attachments/ (blobs.go). A name ending in .tar.zst is zstd-compressed.
const (
	ManifestName = "manifest.json"
	dbDir        = "db/"
	keystoreDir  = "keystore/"
	zstdExt      = ".tar.zst"
	formatV1     = 1
	// maxManifest bounds what a reader takes for a manifest.
	maxManifest = 64 << 20
	// maxZstdWindow bounds the window a compressed archive may ask the
	// reader for (this writer's frames use 8 MiB).
	maxZstdWindow = 128 << 20
)

// Manifest describes a backup (spec §10 manifest.json).
type Manifest struct {
	Format       int       `json:"format"`
	BackupID     string    `json:"backup_id"`
	CreatedAt    time.Time `json:"created_at"`
	Version      string    `json:"version"`
	PebbleFormat uint64    `json:"pebble_format"`
	Threads      int64     `json:"threads"`
	Messages     int64     `json:"messages"`
	// AuditHead is the last audit run whose purges the backup reflects:
	// a restore replays every purge recorded after it.
	AuditHead audit.Head `json:"audit_head"`
	// Erased is the database's erase marker at the backup.
	Erased bool `json:"erased"`
	// Sealed: the backup holds the key store (wrapped data keys) of its
	// moment under keystore/, beside the data (spec §12).
	Sealed bool `json:"sealed,omitempty"`
	// Attachments is what the backup holds of the attachments' blob store
	// (blobs.go); absent when the backup was made without one.
	Attachments *Attachments `json:"attachments,omitempty"`
	Files       []File       `json:"files"`
	// Signature is the ed25519 signature of the manifest line without this
	// member (audit.SignJSON), when AUDIT_SIGNING_KEY is set. Last member.
	Signature string `json:"signature,omitempty"`
}

// File is one file of the checkpoint, named as in the archive.
type File struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Sentinel errors.
var (
	// ErrInvalid: the archive or its manifest does not verify.
	ErrInvalid = errors.New("backup does not verify")
	// ErrFormat: a backup file's name ends neither .tar nor .tar.zst.
	ErrFormat = errors.New("the name of a backup file ends .tar or .tar.zst, which gives its format")
	// ErrExists: a backup file would replace an existing file.
	ErrExists = errors.New("the file exists")
	// ErrCancelled: the backup's client went away (a closed pipe or
	// connection, Ctrl-C); counted as cancelled, not failed.
	ErrCancelled = errors.New("backup cancelled by its client")
	// ErrNoBackupPath: a backup to BACKUP_PATH was asked for while it is unset.
	ErrNoBackupPath = errors.New("PROGRESSDB_BACKUP_PATH is not set")
)

// encode renders the manifest as one line, signed when key is set.
func (m Manifest) encode(key ed25519.PrivateKey) ([]byte, error) {
	m.Signature = ""
	line, err := json.Marshal(m)
	if err != nil || key == nil {
		return line, err
	}
	m.Signature = audit.SignJSON(key, line)
	return json.Marshal(m)
}

// decodeManifest parses a manifest and checks its own fields.
func decodeManifest(raw []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: manifest.json: %w", ErrInvalid, err)
	}
	switch {
	case m.Format != formatV1:
		return m, fmt.Errorf("%w: manifest.json: format %d, this version reads %d", ErrInvalid, m.Format, formatV1)
	case m.BackupID == "":
		return m, fmt.Errorf("%w: manifest.json: no backup_id", ErrInvalid)
	case len(m.Files) == 0:
		return m, fmt.Errorf("%w: manifest.json: lists no files", ErrInvalid)
	}
	seen := make(map[string]bool, len(m.Files))
	keys, blobs := false, 0
	for _, f := range m.Files {
		folder, _, ok := splitName(f.Name)
		if !ok || seen[f.Name] || f.Size < 0 || len(f.SHA256) != 64 || folder == keystoreDir && !m.Sealed {
			return m, fmt.Errorf("%w: manifest.json: bad file entry %q", ErrInvalid, f.Name)
		}
		keys = keys || folder == keystoreDir
		if folder == attachmentsDir {
			blobs++
		}
		seen[f.Name] = true
	}
	if m.Sealed && !keys {
		return m, fmt.Errorf("%w: manifest.json: sealed, but lists no key store file", ErrInvalid)
	}
	return m, checkAttachments(m, blobs)
}

// checkSignature reports why raw (the manifest line) is not signed by pub,
// or "" when it is.
func checkSignature(pub ed25519.PublicKey, raw []byte, m Manifest) string {
	return audit.CheckJSONSignature(pub, bytes.TrimSpace(raw), m.Signature)
}

// splitName accepts db/<file> and keystore/<file> with a plain file name
// (no folders, no "..", nothing a restore could write outside its folder),
// and attachments/<tid>/<mid>/<aid> with valid IDs, and returns the
// folder and the file's name (the blob name for an attachment).
func splitName(name string) (folder, base string, ok bool) {
	if rel, ok := blobName(name); ok {
		return attachmentsDir, rel, true
	}
	for _, folder := range []string{dbDir, keystoreDir} {
		if base, ok := strings.CutPrefix(name, folder); ok && validBase(base) {
			return folder, base, true
		}
	}
	return "", "", false
}

func validBase(base string) bool {
	if base == "" || base == "." || base == ".." || len(base) > 255 {
		return false
	}
	for i := 0; i < len(base); i++ {
		c := base[i]
		if c == '/' || c == '\\' || c == 0 {
			return false
		}
	}
	return true
}

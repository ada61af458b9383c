package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
)

// The attachments' two settings (spec §16): where their bytes go and how
// large one may be.

// DefaultAttachmentMaxBytes is PROGRESSDB_ATTACHMENT_MAX_BYTES's default,
// 25 MiB.
const DefaultAttachmentMaxBytes = 25 << 20

// maxAttachmentMaxBytes bounds the setting: 1 TiB, far beyond any chat
// file, well inside what a segment number counts (server/pkg/sealstream).
const maxAttachmentMaxBytes = 1 << 40

// AttachmentSchemes are the blob stores PROGRESSDB_ATTACHMENTS_URL may
// name (gocloud.dev/blob drivers built in).
func AttachmentSchemes() []string { return []string{"file", "s3", "gs", "azblob"} }

// ErrInvalidAttachmentsURL: PROGRESSDB_ATTACHMENTS_URL cannot be used.
var ErrInvalidAttachmentsURL = errors.New("invalid " + VarAttachmentsURL)

// DefaultAttachmentsDir is the folder attachments go to when
// PROGRESSDB_ATTACHMENTS_URL is unset: beside the database, never inside
// it (DB_PATH is a Pebble folder that backups checkpoint and the erase
// step owns).
func DefaultAttachmentsDir(dbPath string) string {
	return filepath.Clean(dbPath) + "-attachments"
}

// FileURL is the file:// URL of folder dir (made absolute).
func FileURL(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil
}

// ParseAttachmentsURL checks the form of an attachments URL and returns
// its scheme and, for file://, its folder. Errors wrap
// ErrInvalidAttachmentsURL. A remote store's URL is only parsed here: its
// driver opens it at start.
func ParseAttachmentsURL(raw string) (scheme, dir string, err error) {
	schemes := strings.Join(AttachmentSchemes(), "://, ") + "://"
	u, perr := url.Parse(raw)
	if perr != nil || u.Scheme == "" {
		return "", "", fmt.Errorf("%w: not a URL: want one of %s", ErrInvalidAttachmentsURL, schemes)
	}
	known := false
	for _, s := range AttachmentSchemes() {
		known = known || s == u.Scheme
	}
	if !known {
		return "", "", fmt.Errorf("%w: unknown scheme %q: want one of %s", ErrInvalidAttachmentsURL, u.Scheme, schemes)
	}
	if u.Scheme != "file" {
		if u.Host == "" {
			return "", "", fmt.Errorf("%w: %s:// needs a bucket name (%s://BUCKET)", ErrInvalidAttachmentsURL, u.Scheme, u.Scheme)
		}
		return u.Scheme, "", nil
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", "", fmt.Errorf("%w: file:// takes an absolute folder (file:///var/lib/progressdb-attachments), not host %q", ErrInvalidAttachmentsURL, u.Host)
	}
	if !strings.HasPrefix(u.Path, "/") || u.Path == "/" {
		return "", "", fmt.Errorf("%w: file:// takes an absolute folder other than /, such as file:///var/lib/progressdb-attachments", ErrInvalidAttachmentsURL)
	}
	return "file", filepath.FromSlash(u.Path), nil
}

// validateAttachments checks PROGRESSDB_ATTACHMENTS_URL (a known store; a
// folder outside DB_PATH) and PROGRESSDB_ATTACHMENT_MAX_BYTES.
func (c Config) validateAttachments(vars map[string]string) *Error {
	_, dir, err := ParseAttachmentsURL(c.AttachmentsURL)
	if err != nil {
		return &Error{VarAttachmentsURL, c.AttachmentsURL, strings.TrimPrefix(err.Error(), ErrInvalidAttachmentsURL.Error()+": ")}
	}
	if dir != "" {
		if err := checkApart(dir, c.DBPath); err != nil {
			return &Error{VarAttachmentsURL, c.AttachmentsURL, "must be a folder outside " + VarDBPath +
				" (neither inside it nor holding it): backups checkpoint that folder as a Pebble database, and erasure owns its files"}
		}
	}
	if c.AttachmentMaxBytes < 1 || c.AttachmentMaxBytes > maxAttachmentMaxBytes {
		return &Error{VarAttachmentMaxBytes, vars[VarAttachmentMaxBytes], "must be a whole number of bytes from 1 to " +
			strconv.FormatInt(maxAttachmentMaxBytes, 10) + " (default 26214400, 25 MiB)"}
	}
	return nil
}

// checkApart fails when a and b are the same folder or one holds the
// other, after resolving the symbolic links of what exists.
func checkApart(a, b string) error {
	ra, rb := resolvedOrAsGiven(a), resolvedOrAsGiven(b)
	if within(ra, rb) || within(rb, ra) {
		return errors.New("overlapping folders")
	}
	return nil
}

// resolvedOrAsGiven is p with its links resolved, or p itself when that
// cannot be done (a file where a folder should be): the variable naming
// that path reports it, not an overlap that is not there.
func resolvedOrAsGiven(p string) string {
	if r, err := resolve(p); err == nil {
		return r
	}
	return p
}

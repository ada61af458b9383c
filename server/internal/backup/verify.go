package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// zstdMagic starts every zstd frame: archives are recognised by content,
// so a stream read from standard input needs no name.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Report is what Verify found (backup verify --json).
type Report struct {
	File     string   `json:"file"`
	Valid    bool     `json:"valid"`
	Manifest Manifest `json:"manifest"`
	// Signed: the manifest carries a signature; SignatureChecked: it was
	// checked against a public key (and verified, unless a problem says so).
	Signed           bool `json:"signed"`
	SignatureChecked bool `json:"signature_checked"`
	// Problems names everything that failed: the archive, the manifest,
	// a file's hash or size, the signature, the consistency check.
	Problems []string `json:"problems"`
}

// Verify checks the backup at path (spec §10 backup verify): every file's
// size and SHA-256 against the manifest, no file missing or extra, the
// signature with pub (required when pub is set), and the checkpoint,
// unpacked into a temporary folder beside tmpParent ("" for the system's),
// opened with the store's consistency check, its counts, erase marker and
// audit head matching the manifest. The error is for an archive that
// cannot be read at all.
func Verify(ctx context.Context, path string, pub ed25519.PublicKey, tmpParent string) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{File: path}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return VerifyReader(ctx, path, f, pub, tmpParent)
}

// VerifyReader is Verify of the archive read from r (standard input for
// `backup verify -`); name is what the report calls it.
func VerifyReader(ctx context.Context, name string, r io.Reader, pub ed25519.PublicKey, tmpParent string) (Report, error) {
	tmp, err := os.MkdirTemp(tmpParent, ".progressdb-verify-*")
	if err != nil {
		return Report{File: name}, fmt.Errorf("backup verify: %w", err)
	}
	defer os.RemoveAll(tmp)
	db := filepath.Join(tmp, "db")
	if err := os.Mkdir(db, 0o700); err != nil {
		return Report{File: name}, fmt.Errorf("backup verify: %w", err)
	}
	// Blobs are checked as they stream by, never written.
	return unpack(ctx, name, r, db, fixedDir(filepath.Join(tmp, "keystore")), nil, pub)
}

// Unpack reads the archive at path into dir (which must exist and be
// empty), its key store, if it holds one, into ksDir (made when missing),
// a file:// store's blobs into the folder beside dir, and verifies it as
// Verify says.
func Unpack(ctx context.Context, path, dir, ksDir string, pub ed25519.PublicKey) (Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{File: path}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return unpack(ctx, path, f, dir, fixedDir(ksDir), &blobFolder{dir: config.DefaultAttachmentsDir(dir)}, pub)
}

// fixedDir is a keyDir that makes dir when asked for it.
func fixedDir(dir string) func() (string, error) {
	return func() (string, error) {
		if dir == "" {
			return "", nil
		}
		return dir, os.MkdirAll(dir, 0o700)
	}
}

// unpack is Unpack of the archive read from src. keyDir is asked, at the
// first key store entry, for the folder the key store goes into, made; ""
// when there is none (the backup then does not verify), an error to stop.
// A file:// store's blobs go where blobs says (nil: checked and dropped).
// The archive is untrusted
// until verified: no entry is written beyond the size the manifest gives
// it, nor the archive beyond the manifest's total, and an entry whose
// header declares another size stops the reading at once, before any of
// its bytes are read (a decompression bomb writes nothing).
func unpack(ctx context.Context, name string, src io.Reader, dir string, keyDir func() (string, error), blobs *blobFolder, pub ed25519.PublicKey) (Report, error) {
	rep := Report{File: name, Problems: []string{}}
	problem := func(format string, args ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...)) }
	r, closeZ, err := decompress(bufio.NewReaderSize(src, 1<<20))
	if err != nil {
		problem("archive: %v", err)
		return rep, nil
	}
	defer closeZ()

	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		problem("archive: not a readable tar stream: %v", err)
		return rep, nil
	}
	if hdr.Name != ManifestName || hdr.Size > maxManifest {
		problem("archive: first entry is %q, want %s", hdr.Name, ManifestName)
		return rep, nil
	}
	raw, err := io.ReadAll(io.LimitReader(tr, maxManifest))
	if err != nil {
		problem("manifest.json: %v", err)
		return rep, nil
	}
	m, err := decodeManifest(raw)
	rep.Manifest = m
	if err != nil {
		problem("%v", err)
		return rep, nil
	}
	rep.Signed = m.Signature != ""
	if pub != nil {
		rep.SignatureChecked = true
		if why := checkSignature(pub, raw, m); why != "" {
			problem("manifest.json: signature: %s", why)
		}
	}

	want := make(map[string]File, len(m.Files))
	var budget int64 // what is left of the manifest's total
	for _, f := range m.Files {
		want[f.Name] = f
		budget += f.Size
	}
	seen := make(map[string]bool, len(m.Files))
	ksDir, ksAsked := "", false
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			problem("archive: cut short or damaged after %d files: %v", len(seen), err)
			return rep, nil
		}
		// Any entry that is not what the manifest announces ends the
		// reading: skipping it would read as many bytes as its header
		// claims.
		wf, ok := want[hdr.Name]
		switch {
		case !ok:
			problem("%s: in the archive, not in the manifest", hdr.Name)
			return rep, nil
		case seen[hdr.Name]:
			problem("%s: in the archive twice", hdr.Name)
			return rep, nil
		case hdr.Typeflag != tar.TypeReg:
			problem("%s: not a regular file", hdr.Name)
			return rep, nil
		case hdr.Size != wf.Size:
			problem("%s: the archive declares %d bytes, the manifest says %d; nothing of it was written", hdr.Name, hdr.Size, wf.Size)
			return rep, nil
		case wf.Size > budget:
			problem("%s: beyond the manifest's total size", hdr.Name)
			return rep, nil
		}
		seen[hdr.Name] = true
		budget -= wf.Size
		folder, base, _ := splitName(hdr.Name)
		target := filepath.Join(dir, base)
		if folder == keystoreDir {
			if !ksAsked {
				ksAsked = true
				if ksDir, err = keyDir(); err != nil {
					return rep, err
				}
			}
			if ksDir == "" {
				problem("%s: the backup holds a key store (sealed content), and no folder was given for it", hdr.Name)
				return rep, nil
			}
			target = filepath.Join(ksDir, base)
		}
		if folder == attachmentsDir {
			if target, err = blobs.target(base); err != nil {
				return rep, err
			}
		}
		why, err := extractFile(tr, target, wf)
		if err != nil {
			return rep, err
		}
		if why != "" {
			problem("%s: %s", hdr.Name, why)
		}
	}
	for _, f := range m.Files {
		if !seen[f.Name] {
			problem("%s: in the manifest, missing from the archive", f.Name)
		}
	}
	if len(rep.Problems) > 0 {
		return rep, nil
	}
	stats, err := store.Inspect(ctx, dir)
	switch {
	case err != nil:
		problem("checkpoint: %v", err)
	default:
		if stats.Threads != m.Threads || stats.Messages != m.Messages {
			problem("checkpoint: holds %d threads and %d messages, the manifest says %d and %d",
				stats.Threads, stats.Messages, m.Threads, m.Messages)
		}
		if stats.Erased != m.Erased {
			problem("checkpoint: erase marker is %t, the manifest says %t", stats.Erased, m.Erased)
		}
		if stats.HasHead && audit.Head(stats.Head) != m.AuditHead {
			problem("checkpoint: audit head is run %q, the manifest says %q", stats.Head.RunID, m.AuditHead.RunID)
		}
	}
	if m.Sealed {
		if err := keystore.Inspect(ksDir); err != nil {
			problem("key store checkpoint: %v", err)
		}
	}
	rep.Valid = len(rep.Problems) == 0
	return rep, nil
}

// extractFile writes one archive entry to path (0600; "" checks it and
// drops it), at most want.Size bytes of it, checking its size and hash;
// why says what did not match. The error is for the local disk.
func extractFile(r io.Reader, path string, want File) (why string, err error) {
	out := io.Discard
	var f *os.File
	if path != "" {
		if f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return "", fmt.Errorf("backup: %w", err)
		}
		out = f
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, want.Size))
	if err == nil && n == want.Size {
		// One byte more than the manifest gives is read, never written.
		if k, _ := r.Read(make([]byte, 1)); k > 0 {
			n++
		}
	}
	if f != nil {
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("backup: write %s: %w", path, err)
		}
		return "cut short: " + err.Error(), nil
	}
	switch got := hex.EncodeToString(h.Sum(nil)); {
	case n > want.Size:
		return fmt.Sprintf("larger than the %d bytes the manifest says", want.Size), nil
	case n != want.Size:
		return fmt.Sprintf("size is %d, the manifest says %d", n, want.Size), nil
	case got != want.SHA256:
		return "SHA-256 does not match the manifest", nil
	}
	return "", nil
}

// decompress recognises a zstd stream by its magic number.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	head, err := br.Peek(len(zstdMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, func() {}, err
	}
	if !bytes.Equal(head, zstdMagic) {
		return br, func() {}, nil
	}
	// The window bound keeps a hostile frame from asking for gigabytes of
	// memory; ours use a few MiB.
	zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return nil, func() {}, fmt.Errorf("zstd: %w", err)
	}
	return zr, zr.Close, nil
}

package replica

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
)

// A snapshot's stream (docs/replication-design.md §7): snapshotMagic,
// then the shard's backup archive in chunks (a uvarint length and as many
// bytes; a length of 0 ends the archive), then the shard's audit trail as
// audit.TrailCopy writes it. The chunks let the receiver hand the archive
// to the backup's reader, which reads ahead, without losing the trail
// after it.

// snapshotMagic opens every snapshot stream: a stream of another layout
// is refused before anything is unpacked.
var snapshotMagic = []byte("progressdb snapshot 2\n")

// snapshotChunk is the most a chunk of the archive holds.
const snapshotChunk = 256 << 10

// writeStream writes a snapshot's stream: archive writes the backup,
// trail the audit trail.
func writeStream(ctx context.Context, w io.Writer, archive, trail func(io.Writer) error) error {
	if _, err := w.Write(snapshotMagic); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(chunkWriter{w: w}, snapshotChunk)
	if err := archive(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if _, err := w.Write([]byte{0}); err != nil { // the archive's end
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return trail(w)
}

// chunkWriter writes each Write as one chunk.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if _, err := c.w.Write(binary.AppendUvarint(nil, uint64(len(p)))); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// chunkReader reads the archive's chunks, and io.EOF at their end.
type chunkReader struct {
	r    *bufio.Reader
	left uint64 // of the current chunk
	done bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		n, err := binary.ReadUvarint(c.r)
		if err != nil {
			return 0, fmt.Errorf("%w: the archive is cut short: %w", ErrSnapshotRefused, err)
		}
		c.left, c.done = n, n == 0
	}
	if uint64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint64(n)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: the archive is cut short", ErrSnapshotRefused)
	}
	return n, err
}

// readStream unpacks a snapshot's stream into in's staged folders: the
// database and a sealed shard's key store, verified, then the journal
// naming the folders beside it, then the trail. Any error leaves the
// caller to remove them.
func readStream(ctx context.Context, r io.Reader, in *staged) error {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, snapshotMagic) {
		return fmt.Errorf("%w: not a snapshot stream (%q)", ErrSnapshotRefused, magic)
	}
	archive := &chunkReader{r: br}
	rep, err := backup.ExtractReader(ctx, "snapshot", archive, in.dir, in.keys, in.blobs, nil)
	if err == nil && !rep.Valid {
		err = fmt.Errorf("%w: the stream does not verify: %s", ErrSnapshotRefused, strings.Join(rep.Problems, "; "))
	}
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, archive); err != nil { // past the archive's end
		return err
	}
	// Before the trail is unpacked: a crash from here on leaves a staged
	// trail that RecoverFolder finds through the journal.
	if err := writeJournal(in.dir, in.beside); err != nil {
		return err
	}
	if in.trail == "" {
		_, err := io.Copy(io.Discard, br) // this replica keeps no trail
		return err
	}
	if err := os.MkdirAll(filepath.Dir(in.trail), 0o750); err != nil {
		return err
	}
	if err := audit.ReadTrail(ctx, br, in.trail+stagedSuffix); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshotRefused, err)
	}
	return nil
}

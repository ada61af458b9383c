package attachments

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Upload leftovers on every replica (docs/replication-design.md §14).
// The orphan sweep walks the leader's folder: an upload's temporary file
// that the leader lacks and a follower holds (its deletion was in log
// entries a snapshot replaced, or the leader's folder was replaced) is
// beyond it. So after each sweep the leader proposes one more blob
// effect, applied by every replica but the proposer (whose folder is the
// sweep's own, each removal an audit item): remove every temporary file
// of this replica's folder last written before the sweep's cutoff,
// except those of the uploads the leader has under way. The effect is
// after every chunk, commit and deletion proposed before it, so what it
// finds older than the grace period belongs to no upload that can still
// complete. A follower's removals are logged, not audited: every
// replica keeps the same trail, and the leader's copy of such an upload,
// if it ever had one, was audited when its own sweep removed it.

// opSweep removes a replica's leftovers (sweepEffect).
const opSweep byte = 4

// sweepEffect is an opSweep's content, in a blobEffect's data.
type sweepEffect struct {
	proposer uint64    // the replica whose folder is skipped
	cutoff   time.Time // a leftover last written before it goes
	keep     []string  // blob names whose uploads are under way
}

func (s sweepEffect) encode() []byte {
	b := binary.AppendUvarint(nil, s.proposer)
	b = binary.AppendVarint(b, s.cutoff.UnixNano())
	return append(b, strings.Join(s.keep, "\n")...)
}

func decodeSweep(p []byte) (sweepEffect, error) {
	var s sweepEffect
	var w int
	if s.proposer, w = binary.Uvarint(p); w <= 0 {
		return s, fmt.Errorf("%w: sweep proposer", ErrEffect)
	}
	p = p[w:]
	ns, w := binary.Varint(p)
	if w <= 0 {
		return s, fmt.Errorf("%w: sweep cutoff", ErrEffect)
	}
	s.cutoff, p = time.Unix(0, ns), p[w:]
	if len(p) > 0 {
		s.keep = strings.Split(string(p), "\n")
	}
	for _, name := range s.keep {
		if _, _, _, leftover, ok := ObjectOf(name); !ok || leftover {
			return s, fmt.Errorf("%w: sweep keeps %q", ErrEffect, name)
		}
	}
	return s, nil
}

// writingNames are the blobs this process's uploads are writing, sorted.
func (b *Blobs) writingNames() []string {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return slices.Sorted(maps.Keys(b.writing))
}

// SweepLeftovers has every other replica of the shard remove its
// uploads' temporary files last written before cutoff (the orphan
// sweep's), but for the uploads under way here: on a replicated shard
// with a file:// folder, a blob effect through the log; otherwise
// nothing, the sweep's walk having seen the one folder or bucket.
func (s *ShardBlobs) SweepLeftovers(ctx context.Context, cutoff time.Time) error {
	if !s.replicating(s.st) {
		return nil
	}
	l, err := s.st.RaftLog(ctx)
	if err != nil {
		return err
	}
	sw := sweepEffect{proposer: l.Replica(), cutoff: cutoff, keep: s.writingNames()}
	if err := s.st.ProposeEffect(ctx, store.EffectBlobs, blobEffect{op: opSweep, data: sw.encode()}.encode()); err != nil {
		return fmt.Errorf("sweep the replicas' upload leftovers: %w", err)
	}
	return nil
}

// sweeper removes a replica's leftovers off the apply path: a folder's
// walk can take long, and the group must not wait for it. One walk at a
// time; a sweep asked meanwhile runs after it (the latest one).
type sweeper struct {
	dir    string
	logger *slog.Logger
	mu     sync.Mutex
	next   *sweepEffect // guarded by mu
	busy   bool         // guarded by mu
	// done, when set, is told each walk's end (tests).
	done func(removed int, err error)
}

// ask runs s's sweep, now or after the one under way.
func (w *sweeper) ask(s sweepEffect) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = &s
	if w.busy {
		return
	}
	w.busy = true
	go w.run()
}

func (w *sweeper) run() {
	for {
		w.mu.Lock()
		s := w.next
		w.next = nil
		if s == nil {
			w.busy = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		n, err := removeLeftovers(w.dir, *s, w.logger)
		if err != nil {
			w.logger.Warn("attachment_leftovers_not_swept", "err", err)
		}
		if w.done != nil {
			w.done(n, err)
		}
	}
}

// removeLeftovers removes from dir every upload's temporary file last
// written before s.cutoff whose blob s does not keep, and returns how
// many it removed.
func removeLeftovers(dir string, s sweepEffect, logger *slog.Logger) (int, error) {
	removed := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // gone since its folder was read, or no folder yet
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		tid, mid, aid, leftover, ok := ObjectOf(filepath.ToSlash(rel))
		if !ok || !leftover || slices.Contains(s.keep, store.BlobName(tid, mid, aid)) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || !info.ModTime().Before(s.cutoff) {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := durable.SyncDir(filepath.Dir(p)); err != nil {
			return err
		}
		removed++
		logger.Info("attachment_leftover_removed", "name", filepath.ToSlash(rel), "size", info.Size(), "written", info.ModTime())
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("sweep upload leftovers in %s: %w", dir, err)
	}
	return removed, nil
}

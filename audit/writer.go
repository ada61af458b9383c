package audit

import (
	"bufio"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// Writer appends one run's records to
// <root>/YYYY-MM/retention-<ts>-<run_id>.jsonl.inprogress. It is safe for
// concurrent use. A write error is sticky: every later call returns it.
type Writer struct {
	mu     sync.Mutex
	now    func() time.Time
	runID  string
	dir    string // the month folder
	path   string // current path: .inprogress until Close
	f      *os.File
	bw     *bufio.Writer
	seq    int64  // seq of the next line
	prev   string // hash of the last line written
	tally  tally
	err    error // sticky write error
	closed bool
	key    ed25519.PrivateKey // signs the footer when set
	// replicate, when set, takes the lines instead of the file
	// (Options.Replicate): pending holds those not handed over yet, the
	// first of them numbered pendingSeq, and name is the file's sealed
	// name under the root.
	replicate  func(FileOp) error
	pending    [][]byte
	pendingSeq int64
	name       string
}

// Create makes the month folder (0750) and the file (0640), writes the
// header and syncs it and the folder entry before returning: no delete may
// happen before Create returns nil. The file is named after h.StartedAt,
// which must be set. The header's prev_file is set to chain the file to
// the newest sealed file under root (see previousFile); the caller must
// hold the retention lease. When the folder or the file cannot be made or
// written, the error wraps ErrUnwritable and nothing is left behind.
func Create(root, runID string, h Header) (*Writer, error) {
	return CreateWith(root, runID, h, Options{})
}

// Options tune how files are written.
type Options struct {
	// SigningKey, when set, makes every footer carry a signature (see
	// SignatureMessage).
	SigningKey ed25519.PrivateKey
	// Replicate, when set, is a replicated shard's group: the writer
	// touches no file, and hands its lines to Replicate where it would
	// have written and synced them (the header in Create, the records
	// in Sync, the footer and the seal in Close). Replicate returns once
	// this replica applied them (ApplyFileOp): the file then holds them,
	// synced. SealAbandonedWith seals through it too.
	Replicate func(FileOp) error
}

// CreateWith is Create with options.
func CreateWith(root, runID string, h Header, o Options) (*Writer, error) {
	return newWriterWith(root, runID, h, time.Now, o)
}

// newWriter is Create with the clock that stamps each line's time.
func newWriter(root, runID string, h Header, now func() time.Time) (*Writer, error) {
	return newWriterWith(root, runID, h, now, Options{})
}

// newWriterWith is CreateWith with the clock that stamps each line's time.
func newWriterWith(root, runID string, h Header, now func() time.Time, o Options) (*Writer, error) {
	if !validRunID(runID) {
		return nil, fmt.Errorf("audit: %w: %q", ErrInvalidRunID, runID)
	}
	if h.StartedAt.IsZero() {
		return nil, fmt.Errorf("audit: %w: header started_at is not set", ErrInvalidRecord)
	}
	if root == "" {
		return nil, fmt.Errorf("audit: %w: no audit folder configured", ErrUnwritable)
	}
	h.StartedAt = h.StartedAt.UTC()
	h.Cutoff = h.Cutoff.UTC()
	if h.MaxAge == "" {
		h.MaxAge = "0" // off, as the environment writes it
	}
	prev, err := previousFile(root)
	if err != nil {
		// Without its predecessor's hash the file would break the chain.
		return nil, fmt.Errorf("audit: %w: %w", ErrUnwritable, err)
	}
	h.PrevFile = &prev

	dir := filepath.Join(root, h.StartedAt.Format(monthLayout))
	final := filepath.Join(dir, sealedName(h.StartedAt, runID))
	w := &Writer{now: now, runID: runID, dir: dir, path: final + suffixInProgress, key: o.SigningKey,
		replicate: o.Replicate, name: h.StartedAt.Format(monthLayout) + "/" + sealedName(h.StartedAt, runID)}
	header, err := w.encode(MsgHeader, h)
	if err != nil {
		return nil, err
	}
	if w.replicate != nil {
		if _, err := os.Lstat(final); err == nil {
			return nil, fmt.Errorf("audit: %w: %s already exists", ErrUnwritable, final)
		}
		_ = w.write(header)
		if err := w.flushSync(); err != nil {
			return nil, fmt.Errorf("audit: %w: %w", ErrUnwritable, err)
		}
		return w, nil
	}

	created, err := makeDirs(dir)
	if err != nil {
		removeDirs(created)
		return nil, fmt.Errorf("audit: %w: create %s: %w", ErrUnwritable, dir, err)
	}
	if err := w.open(final, created, header); err != nil {
		removeDirs(created)
		return nil, fmt.Errorf("audit: %w: %w", ErrUnwritable, err)
	}
	return w, nil
}

// open creates the file, writes and syncs the header line, and syncs the
// folders whose entries changed. On failure it removes the file again.
func (w *Writer) open(final string, created []string, header []byte) error {
	if _, err := os.Lstat(final); err == nil {
		return fmt.Errorf("%s already exists", final)
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	w.f = f
	w.bw = bufio.NewWriter(f)
	err = f.Chmod(fileMode) // explicit, so the umask cannot change it
	if err == nil {
		err = w.write(header)
	}
	if err == nil {
		err = w.flushSync()
	}
	if err == nil {
		err = durable.SyncDir(w.dir) // the file's entry
	}
	for _, d := range created { // each new folder's entry lives in its parent
		if err == nil {
			err = durable.SyncDir(filepath.Dir(d))
		}
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(w.path)
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	return nil
}

// Item appends an item record (buffered until Sync). An empty cause is
// written as "deleted"; times are written in UTC; purged_at is kept only for purged items and, when missing there, set
// to the time of writing; a reason longer than 4 KiB is shortened. An
// invalid item is refused and leaves the writer usable.
func (w *Writer) Item(it Item) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	if !validItemType(it.ItemType) {
		return fmt.Errorf("audit: %w: item_type %q", ErrInvalidRecord, it.ItemType)
	}
	if !validItemStatus(it.Status) {
		return fmt.Errorf("audit: %w: item status %q", ErrInvalidRecord, it.Status)
	}
	if it.Cause == "" {
		it.Cause = CauseDeleted // the one cause there was before policies
	}
	if !validCause(it.Cause) {
		return fmt.Errorf("audit: %w: item cause %q", ErrInvalidRecord, it.Cause)
	}
	it.DeletedAt = it.DeletedAt.UTC()
	switch {
	case it.Status != StatusPurged:
		it.PurgedAt = nil
	case it.PurgedAt == nil:
		at := w.now().UTC()
		it.PurgedAt = &at
	default:
		at := it.PurgedAt.UTC()
		it.PurgedAt = &at
	}
	it.Reason = truncateReason(it.Reason)
	line, err := w.encode(MsgItem, it)
	if err != nil {
		return err
	}
	if err := w.write(line); err != nil {
		return err
	}
	w.tally.add(&it)
	return nil
}

// Sync flushes and fsyncs every record appended so far.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	return w.flushSync()
}

// Counts returns a footer holding the counts of the items written so far
// (scanned = items; eligible = purged + failed + dry_run), for callers that
// want their footer to agree with the file by construction.
func (w *Writer) Counts() Footer {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tally.footer()
}

// Close appends the footer, syncs, renames the file to .jsonl and syncs the
// folder. It returns the final path. After Close every method returns
// ErrClosed, or the sticky error when Close failed; the file then stays
// .inprogress and SealAbandoned finishes it later.
func (w *Writer) Close(f Footer) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return "", err
	}
	if !validRunStatus(f.Status) {
		return "", fmt.Errorf("audit: %w: footer status %q", ErrInvalidRecord, f.Status)
	}
	f.FinishedAt = f.FinishedAt.UTC()
	f.Reason = truncateReason(f.Reason)
	line, err := encodeFooter(w.now(), w.runID, w.seq, w.prev, f, w.key)
	if err != nil {
		return "", fmt.Errorf("audit: %w", err)
	}

	w.closed = true
	err = w.write(line)
	if w.replicate != nil {
		return w.sealReplicated(err)
	}
	if err == nil {
		err = w.flushSync()
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = w.fail(fmt.Errorf("audit: close %s: %w", w.path, cerr))
	}
	if err != nil {
		return "", err
	}
	final := strings.TrimSuffix(w.path, suffixInProgress)
	if err := renameNew(w.path, final); err != nil {
		return "", w.fail(fmt.Errorf("audit: seal %s: %w", w.path, err))
	}
	w.path = final
	if err := durable.SyncDir(w.dir); err != nil {
		return "", w.fail(fmt.Errorf("audit: %w", err))
	}
	return final, nil
}

// LastHash is the hex SHA-256 of the last line written: after Close, of
// the footer, which is what the next file's prev_file holds.
func (w *Writer) LastHash() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.prev
}

// Path is the file's current path: .inprogress until Close succeeds, the
// final .jsonl path after.
func (w *Writer) Path() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.path
}

// usable returns the sticky error, or ErrClosed after Close.
func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

// fail records err as the sticky error and returns it.
func (w *Writer) fail(err error) error {
	w.err = err
	return err
}

// encode renders the next line of the chain, stamped with the clock.
func (w *Writer) encode(msg string, body any) ([]byte, error) {
	line, err := encodeLine(msg, w.now(), w.runID, w.seq, w.prev, body)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return line, nil
}

// write buffers line and advances the chain; a failure is sticky.
func (w *Writer) write(line []byte) error {
	if w.replicate != nil {
		if len(w.pending) == 0 {
			w.pendingSeq = w.seq
		}
		w.pending = append(w.pending, line)
		w.seq++
		w.prev = lineHash(line)
		return nil
	}
	_, err := w.bw.Write(line)
	if err == nil {
		err = w.bw.WriteByte('\n')
	}
	if err != nil {
		return w.fail(fmt.Errorf("audit: write %s: %w", w.path, err))
	}
	w.seq++
	w.prev = lineHash(line)
	return nil
}

func (w *Writer) flushSync() error {
	if w.replicate != nil {
		return w.handOver(false)
	}
	if err := w.bw.Flush(); err != nil {
		return w.fail(fmt.Errorf("audit: write %s: %w", w.path, err))
	}
	if err := w.f.Sync(); err != nil {
		return w.fail(fmt.Errorf("audit: sync %s: %w", w.path, err))
	}
	return nil
}

// handOver gives the pending lines to the group; seal: with the seal.
func (w *Writer) handOver(seal bool) error {
	if len(w.pending) == 0 && !seal {
		return nil
	}
	op := FileOp{Name: w.name, Seq: w.pendingSeq, Lines: w.pending, Seal: seal}
	if err := w.replicate(op); err != nil {
		return w.fail(fmt.Errorf("audit: replicate %s: %w", w.path, err))
	}
	w.pending = nil
	return nil
}

// sealReplicated ends Close for a replicated file: the footer and the
// seal go to the group in one operation.
func (w *Writer) sealReplicated(err error) (string, error) {
	if err == nil {
		err = w.handOver(true)
	}
	if err != nil {
		return "", err
	}
	w.path = strings.TrimSuffix(w.path, suffixInProgress)
	return w.path, nil
}

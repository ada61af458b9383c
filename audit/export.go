package audit

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/progressdb/progressdb/server/pkg/durable"
)

// Export files (spec §3.3): <root>/YYYY-MM/export-<YYYYMMDDTHHMMSSZ>-<run_id>.jsonl.gz,
// .inprogress until sealed. Each record is one JSON line; the records made
// durable by one Sync are one gzip member: a file is a valid multi-member
// gzip stream (zcat reads it), a member is complete before the fsync that
// lets its items be deleted, and a crash can only leave a torn last member,
// which sealing cuts off. (A member per record cost more than compressing
// a small record.)
const (
	exportPrefix        = "export-"
	extExport           = ".jsonl.gz"
	extExportInProgress = extExport + suffixInProgress
	extExportCorrupt    = extExport + ".corrupt"
)

// ErrExportUnwritable wraps every failure to create or write an export
// file: the item whose record is not durable must not be deleted.
var ErrExportUnwritable = errors.New("export folder not writable")

// ExportHead is what an export record says about the item before its
// content: the fields of spec §3.3 other than thread and messages.
type ExportHead struct {
	ItemType   string    `json:"item_type"` // "thread" | "message" | "attachment"
	ItemID     string    `json:"item_id"`
	ThreadID   string    `json:"thread_id"`
	Cause      string    `json:"cause"` // why the item is purged: "deleted", ...
	ExportedAt time.Time `json:"exported_at"`
	// Recovered marks a record written again after a crash: an earlier
	// run may have exported the item already (and deleted part of it).
	Recovered bool `json:"recovered,omitempty"`
}

// ExportMessage is one message of a record with every stored version, oldest
// first, each the stored JSON object as it is in the database.
type ExportMessage struct {
	ID       string            `json:"id"`
	Versions []json.RawMessage `json:"versions"`
}

// ExportRecord is a whole decoded record. Thread is the thread's metadata
// as stored (for a message item: its thread's, for context), or null when
// it is gone.
type ExportRecord struct {
	ExportHead
	Thread   json.RawMessage `json:"thread"`
	Messages []ExportMessage `json:"messages"`
	// Attachments are the item's attachments with their bytes
	// (export_attach.go); absent from records without any.
	Attachments []ExportAttachment `json:"attachments,omitempty"`
}

// ExportSummary describes a sealed export file, for the audit footer.
type ExportSummary struct {
	Path    string // final path; "" when nothing was exported
	SHA256  string // hex SHA-256 of the file's bytes
	Records int64
}

// exportName is the final name of the export of the run that started at start.
func exportName(start time.Time, runID string) string {
	return exportPrefix + start.UTC().Format(stampLayout) + "-" + runID + extExport
}

// ExportFileName returns the path an export of runID, started at start,
// has under root once sealed.
func ExportFileName(root string, start time.Time, runID string) string {
	return filepath.Join(root, start.UTC().Format(monthLayout), exportName(start, runID))
}

// RecordEncoder writes one export record as a JSON line, piece by piece, so
// that an item of any size passes through bounded memory: the head, then
// the thread's metadata, then each message and its versions in order, then
// End. Stored values are copied as they are; one that is not valid JSON is
// kept as {"unparsed": "<base64 of its bytes>"}, so nothing is lost and the
// line stays JSON.
type RecordEncoder struct {
	w       *bufio.Writer
	state   int // encThread, encMessages, encVersions, encDone
	nextMsg string
	err     error
}

const (
	encThread = iota
	encMessages
	encVersions
	encAttachments // export_attach.go
	encDone
)

// NewRecordEncoder writes h to w and returns the encoder of the rest of the
// record. Nothing reaches w's underlying writer before End, or before the
// encoder's buffer fills.
func NewRecordEncoder(w io.Writer, h ExportHead) (*RecordEncoder, error) {
	if !validItemType(h.ItemType) {
		return nil, fmt.Errorf("audit: %w: export item_type %q", ErrInvalidRecord, h.ItemType)
	}
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriterSize(w, 64<<10)
	}
	e := &RecordEncoder{w: bw}
	b := make([]byte, 0, 256)
	b = append(b, `{"item_type":`...)
	b = appendString(b, h.ItemType)
	b = append(b, `,"item_id":`...)
	b = appendString(b, h.ItemID)
	b = append(b, `,"thread_id":`...)
	b = appendString(b, h.ThreadID)
	b = append(b, `,"cause":`...)
	b = appendString(b, h.Cause)
	b = append(b, `,"exported_at":"`...)
	b = AppendTime(b, h.ExportedAt)
	b = append(b, '"')
	if h.Recovered {
		b = append(b, `,"recovered":true`...)
	}
	e.write(b)
	return e, e.err
}

func (e *RecordEncoder) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

// Thread writes the thread's stored metadata (nil: null). It must come
// before any message; without it the record says null.
func (e *RecordEncoder) Thread(raw []byte) error {
	if e.err == nil && e.state != encThread {
		e.err = fmt.Errorf("audit: %w: export thread after messages", ErrInvalidRecord)
	}
	e.write([]byte(`,"thread":`))
	e.value(raw)
	e.state = encMessages
	e.write([]byte(`,"messages":[`))
	return e.err
}

// Message starts the next message; its versions follow.
func (e *RecordEncoder) Message(id string) error {
	switch e.state {
	case encThread:
		_ = e.Thread(nil)
		e.write([]byte(`{"id":`))
	case encMessages:
		e.write([]byte(`{"id":`))
	case encVersions:
		e.write([]byte(`]},{"id":`))
	default:
		e.setErr(fmt.Errorf("audit: %w: export message after attachments or end", ErrInvalidRecord))
	}
	e.writeString(id)
	e.write([]byte(`,"versions":[`))
	e.state = encVersions
	e.nextMsg = ""
	return e.err
}

// Version writes the next stored version of the current message.
func (e *RecordEncoder) Version(raw []byte) error {
	if e.state != encVersions {
		e.setErr(fmt.Errorf("audit: %w: export version outside a message", ErrInvalidRecord))
		return e.err
	}
	if e.nextMsg != "" {
		e.write([]byte{','})
	}
	e.nextMsg = ","
	e.value(raw)
	return e.err
}

// End closes the record and its line and flushes the encoder's buffer.
func (e *RecordEncoder) End() error {
	switch e.state {
	case encThread:
		_ = e.Thread(nil)
		e.write([]byte("]}\n"))
	case encMessages:
		e.write([]byte("]}\n"))
	case encVersions:
		e.write([]byte("]}]}\n"))
	case encAttachments:
		e.write([]byte("]}\n"))
	default:
		e.setErr(fmt.Errorf("audit: %w: export record ended twice", ErrInvalidRecord))
	}
	e.state = encDone
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.err
}

// writeString writes s as a JSON string; IDs need no escaping, which is
// checked rather than assumed.
func (e *RecordEncoder) writeString(s string) {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] || s[i] >= 0x80 {
			e.write(appendString(nil, s))
			return
		}
	}
	if e.err == nil {
		_ = e.w.WriteByte('"')
		_, _ = e.w.WriteString(s)
		e.err = e.w.WriteByte('"')
	}
}

func (e *RecordEncoder) setErr(err error) {
	if e.err == nil {
		e.err = err
	}
}

// value writes a stored JSON value. Values are normally compact JSON
// objects; anything else is made safe for a one-line record.
func (e *RecordEncoder) value(raw []byte) {
	switch {
	case raw == nil:
		e.write([]byte("null"))
	default:
		switch valid, oneLine := validJSON(raw); {
		case !valid:
			b := append([]byte(`{"unparsed":"`), base64.StdEncoding.EncodeToString(raw)...)
			e.write(append(b, `"}`...))
		case !oneLine:
			var c bytes.Buffer
			_ = json.Compact(&c, raw) // valid, checked above
			e.write(c.Bytes())
		default:
			e.write(raw)
		}
	}
}

// ExportWriter appends the export records of one run to
// <root>/YYYY-MM/export-<ts>-<run_id>.jsonl.gz.inprogress. The file is made
// when the first record begins, so a run that exports nothing leaves none.
// One record is written at a time; Sync makes the records finished since
// the last Sync durable, as one gzip member. A write error is sticky.
type ExportWriter struct {
	mu      sync.Mutex
	root    string
	outside []string // folders root must not lie in (CheckExportFolder)
	runID   string
	start   time.Time
	dir     string
	path    string // .inprogress until Close
	f       *os.File
	bw      *bufio.Writer // gzip output, to the file and the hash
	zw      *gzip.Writer
	enc     *bufio.Writer // record encoding, to async
	async   *asyncWriter  // hands the encoding to zw on another goroutine
	sum     hash.Hash
	good    int64 // offset just past the last synced member
	n       int64 // bytes written to the file
	count   int64 // records synced
	pending int64 // records finished in the open member
	member  bool  // a gzip member is open
	rec     *ExportItem
	err     error
	closed  bool
}

// NewExportWriter prepares the export of run runID that started at start;
// nothing is created on disk until the first record.
// The folder is checked now and again when the file is made
// (CheckExportFolder with outside).
func NewExportWriter(root, runID string, start time.Time, outside ...string) (*ExportWriter, error) {
	if !validRunID(runID) {
		return nil, fmt.Errorf("audit: %w: %q", ErrInvalidRunID, runID)
	}
	if root == "" {
		return nil, fmt.Errorf("audit: %w: no export folder configured", ErrExportUnwritable)
	}
	if err := CheckExportFolder(root, outside...); err != nil {
		return nil, err
	}
	start = start.UTC()
	dir := filepath.Join(root, start.Format(monthLayout))
	return &ExportWriter{root: root, outside: outside, runID: runID, start: start, dir: dir,
		path: filepath.Join(dir, exportName(start, runID)) + suffixInProgress}, nil
}

// ExportItem is one record being written; Finish ends it, and the next
// Sync makes it durable.
type ExportItem struct {
	*RecordEncoder
	w *ExportWriter
}

// Begin starts the record of one item. Only one record may be open at a
// time. On error nothing of the record is kept.
func (w *ExportWriter) Begin(h ExportHead) (*ExportItem, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return nil, err
	}
	if w.rec != nil {
		return nil, fmt.Errorf("audit: %w: an export record is still open", ErrInvalidRecord)
	}
	if w.f == nil {
		if err := w.create(); err != nil {
			return nil, w.fail(err)
		}
	}
	if !w.member {
		w.zw.Reset(w.bw) // the compressor is idle between members
		w.member = true
	}
	w.enc.Reset(w.async)
	enc, err := NewRecordEncoder(w.enc, h)
	if err != nil {
		if errors.Is(err, ErrInvalidRecord) {
			return nil, err // nothing reached the file
		}
		return nil, w.fail(fmt.Errorf("audit: %w: write %s: %w", ErrExportUnwritable, w.path, err))
	}
	w.rec = &ExportItem{RecordEncoder: enc, w: w}
	return w.rec, nil
}

// create makes the month folder (0750) and the file (0640) and syncs their
// entries, so that a synced record is found after a crash.
func (w *ExportWriter) create() error {
	if err := CheckExportFolder(w.root, w.outside...); err != nil {
		return err
	}
	created, err := makeDirs(w.dir)
	if err != nil {
		removeDirs(created)
		return fmt.Errorf("audit: %w: create %s: %w", ErrExportUnwritable, w.dir, err)
	}
	if info, err := os.Lstat(w.dir); err != nil || !info.IsDir() {
		return fmt.Errorf("audit: %w: %s is not a folder", ErrExportFolder, w.dir) // a link to one included
	}
	final := strings.TrimSuffix(w.path, suffixInProgress)
	if _, err := os.Lstat(final); err == nil {
		return fmt.Errorf("audit: %w: %s already exists", ErrExportUnwritable, final)
	}
	f, err := os.OpenFile(w.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode) // read back by rewind
	if err == nil {
		err = f.Chmod(fileMode) // explicit, so the umask cannot change it
		if err == nil {
			err = durable.SyncDir(w.dir)
		}
		for _, d := range created {
			if err == nil {
				err = durable.SyncDir(filepath.Dir(d))
			}
		}
		if err != nil {
			_ = f.Close()
			_ = os.Remove(w.path)
		}
	}
	if err != nil {
		removeDirs(created)
		return fmt.Errorf("audit: %w: create %s: %w", ErrExportUnwritable, w.path, err)
	}
	w.f = f
	w.sum = sha256.New()
	w.bw = bufio.NewWriterSize(io.MultiWriter(countWriter{f, &w.n}, w.sum), 256<<10)
	w.zw, _ = gzip.NewWriterLevel(w.bw, gzip.BestSpeed) // a valid level
	w.async = newAsyncWriter(w.zw)
	w.enc = bufio.NewWriterSize(w.async, asyncChunk)
	return nil
}

// countWriter counts the bytes that reached the file.
type countWriter struct {
	w io.Writer
	n *int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	*c.n += int64(n)
	return n, err
}

// Finish ends the record, without syncing: Sync makes every finished
// record durable at once. On error the open member is cut off again and
// the writer fails.
func (it *ExportItem) Finish() error {
	w := it.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rec != it {
		return fmt.Errorf("audit: %w: export record not open", ErrInvalidRecord)
	}
	w.rec = nil
	if err := it.End(); err != nil {
		w.rewind()
		return w.fail(fmt.Errorf("audit: %w: write %s: %w", ErrExportUnwritable, w.path, err))
	}
	w.pending++
	return nil
}

// Commit is Finish and Sync: when it returns nil the record survives a
// crash, and the item may be deleted.
func (it *ExportItem) Commit() error {
	if err := it.Finish(); err != nil {
		return err
	}
	return it.w.Sync()
}

// Sync closes the open gzip member and fsyncs the file: every finished
// record is durable when it returns nil, and only then may their items be
// deleted. On error those records are cut off again and the writer fails.
func (w *ExportWriter) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncLocked()
}

func (w *ExportWriter) syncLocked() error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.rec != nil {
		return fmt.Errorf("audit: %w: an export record is still open", ErrInvalidRecord)
	}
	if !w.member {
		return nil
	}
	err := w.async.wait()
	if err == nil {
		err = w.zw.Close()
	}
	if err == nil {
		err = w.bw.Flush()
	}
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		w.rewind()
		return w.fail(fmt.Errorf("audit: %w: write %s: %w", ErrExportUnwritable, w.path, err))
	}
	w.member = false
	w.good = w.n
	w.count += w.pending
	w.pending = 0
	return nil
}

// Abort drops the record, and with it every record finished since the last
// Sync (they share its gzip member): none of their items may be deleted.
// What reached the file is cut off, and the writer stays usable.
func (it *ExportItem) Abort() error {
	w := it.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rec != it {
		return nil
	}
	w.rec = nil
	return w.rewind()
}

// rewind cuts the file back to its last synced member, dropping the open
// one, and rebuilds the hash from the bytes kept. A failure here is sticky.
func (w *ExportWriter) rewind() error {
	_ = w.async.wait() // the write error, if any, is already the caller's
	w.member, w.pending = false, 0
	w.bw.Reset(io.MultiWriter(countWriter{w.f, &w.n}, w.sum))
	if w.n == w.good {
		return nil
	}
	err := w.f.Truncate(w.good)
	if err == nil {
		_, err = w.f.Seek(w.good, io.SeekStart)
	}
	if err == nil {
		w.sum.Reset()
		_, err = io.Copy(w.sum, io.NewSectionReader(w.f, 0, w.good))
	}
	if err != nil {
		return w.fail(fmt.Errorf("audit: %w: cut %s back: %w", ErrExportUnwritable, w.path, err))
	}
	w.n = w.good
	return nil
}

// Close seals the file: records finished but not yet synced are synced
// (a record still open is dropped with its member), the file is renamed to
// .jsonl.gz and the folder synced. It returns what the audit footer names.
// A writer that wrote nothing returns an empty summary. After a failure the
// file stays .inprogress (holding every synced record) for
// SealAbandonedExports.
func (w *ExportWriter) Close() (ExportSummary, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ExportSummary{}, ErrClosed
	}
	if w.f == nil {
		w.closed = true
		return ExportSummary{}, w.err
	}
	if w.rec != nil {
		w.rec = nil
		_ = w.rewind()
	}
	err := w.err
	if err == nil {
		err = w.syncLocked()
	}
	w.closed = true
	w.async.stop()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ExportSummary{}, w.fail(fmt.Errorf("audit: %w: close %s: %w", ErrExportUnwritable, w.path, err))
	}
	final := strings.TrimSuffix(w.path, suffixInProgress)
	if err := renameNew(w.path, final); err != nil {
		return ExportSummary{}, w.fail(fmt.Errorf("audit: %w: seal %s: %w", ErrExportUnwritable, w.path, err))
	}
	w.path = final
	if err := durable.SyncDir(w.dir); err != nil {
		return ExportSummary{}, w.fail(fmt.Errorf("audit: %w: %w", ErrExportUnwritable, err))
	}
	return ExportSummary{Path: final, SHA256: hex.EncodeToString(w.sum.Sum(nil)), Records: w.count}, nil
}

// Path is the file's current path ("" before the first record).
func (w *ExportWriter) Path() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return ""
	}
	return w.path
}

// Records is the number of records committed so far.
func (w *ExportWriter) Records() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

func (w *ExportWriter) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

func (w *ExportWriter) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// asyncChunk is the size of the pieces handed to the compressor.
const asyncChunk = 64 << 10

// asyncWriter compresses on its own goroutine: the run reads the next part
// of an item from the store while the previous part is compressed, so
// exporting costs about the reading alone on two cores. wait is the only
// synchronisation: after it returns, the writer behind is idle and may be
// used directly.
type asyncWriter struct {
	w    io.Writer   // used by the goroutine only, between waits
	ch   chan []byte // chunks to write; nil asks for an acknowledgement
	ack  chan error
	free chan []byte
}

func newAsyncWriter(w io.Writer) *asyncWriter {
	const buffers = 4
	a := &asyncWriter{w: w, ch: make(chan []byte, buffers), ack: make(chan error), free: make(chan []byte, buffers)}
	for range buffers {
		a.free <- make([]byte, 0, asyncChunk)
	}
	go a.loop()
	return a
}

func (a *asyncWriter) loop() {
	var err error // the first write error is kept: the writer fails with it
	for buf := range a.ch {
		if buf == nil {
			a.ack <- err
			continue
		}
		if err == nil {
			_, err = a.w.Write(buf)
		}
		a.free <- buf[:0]
	}
}

// Write copies p into free buffers and queues them; errors come from wait.
func (a *asyncWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		buf := <-a.free
		k := min(cap(buf), len(p))
		a.ch <- append(buf, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

// wait returns when every queued chunk is written, with the first write
// error so far.
func (a *asyncWriter) wait() error {
	a.ch <- nil
	return <-a.ack
}

// stop ends the goroutine; the writer is not used again.
func (a *asyncWriter) stop() { close(a.ch) }

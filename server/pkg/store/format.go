package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Format version (spec §2, docs/upgrading.md). Every database records the
// format it is written in under sys:format, checked at open before
// anything else is read or written, as Pebble ratchets its format major
// version: a binary refuses a format it does not know, and a feature that
// changes what is stored raises it when first used, once. A database
// written before the marker has none and is in FormatBase.
const formatKey = "sys:format"

// Format is a database's format version.
type Format int

const (
	// FormatBase is what releases before the marker wrote: threads,
	// messages, versions, the indexes, identities, plain content.
	FormatBase Format = 1
	// FormatSealed adds sealed content (spec §12) and the record of the
	// key store it is sealed under (sealKey). A binary that reads only
	// FormatBase would answer sealed records as empty and write plaintext
	// beside them.
	FormatSealed Format = 2
	// FormatAttachments adds attachment records under thread:<tid>:att:
	// (spec §16, attachments.go). A binary that reads only FormatSealed
	// would purge a thread's attachment records and leave their blobs in
	// the blob store, unrecorded.
	FormatAttachments Format = 3
	// FormatNewest is the newest format this binary reads and writes.
	FormatNewest = FormatAttachments
)

// Sentinel errors of the format and the seal.
var (
	// ErrUnknownFormat: the database is in a format this binary does not
	// know (a newer release's); a *FormatError names both.
	ErrUnknownFormat = errors.New("unknown database format")
	// ErrSealedNeedsKEK: the database is sealed and the store was opened
	// without its key store, so it would answer every content as null
	// and write new content in clear.
	ErrSealedNeedsKEK = errors.New("the database is sealed: it opens only with its KEK and key store")
	// ErrForeignKeyStore: the key store is not the one the database is
	// sealed under (another database's, or a fresh one); a
	// *ForeignKeyStoreError names both sides.
	ErrForeignKeyStore = errors.New("the key store belongs to another database")
)

// FormatError refuses a database whose format this binary does not read.
type FormatError struct {
	Found string // the database's format, as recorded
	Known Format // the newest this binary reads
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: the database is in format %s, this binary reads formats %d to %d: run a release that reads it, or restore a backup from before the upgrade (docs/upgrading.md)",
		ErrUnknownFormat, e.Found, FormatBase, e.Known)
}

func (e *FormatError) Unwrap() error { return ErrUnknownFormat }

// String is the format's number.
func (f Format) String() string { return strconv.Itoa(int(f)) }

// readFormat returns the recorded format; ok is false when none is (a
// database from before the marker, or a new one).
func readFormat(r pebble.Reader) (f Format, ok bool, err error) {
	v, err := getFrom(r, []byte(formatKey))
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < int(FormatBase) || n > int(FormatNewest) {
		return 0, false, &FormatError{Found: strconv.Quote(string(v)), Known: FormatNewest}
	}
	return Format(n), true, nil
}

// FormatRaise is one raise of a database's format, recorded once in the
// audit trail (retention's RecordRaises) and logged when it is made.
type FormatRaise struct {
	From Format `json:"from"`
	To   Format `json:"to"`
	// Reason is the feature that raised it ("sealing", "sealed content
	// written before the format marker").
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// owedRaiseNS keeps the raises not yet in the audit trail, one key per
// format raised to (a format is raised to once). The raise's own batch
// writes it, so a crash before the trail has it loses nothing.
const owedRaiseNS = "sys:format:owed:"

func owedRaiseKey(to Format) []byte { return []byte(owedRaiseNS + to.String()) }

// Format returns the database's format.
func (s *Store) Format(ctx context.Context) (Format, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, ok, err := readFormat(s.db)
	if err != nil || ok {
		return f, err
	}
	return FormatBase, nil
}

// OwedRaises returns the format raises not yet recorded in the audit
// trail, oldest format first.
func (s *Store) OwedRaises(ctx context.Context) ([]FormatRaise, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(owedRaiseNS), UpperBound: upperBound([]byte(owedRaiseNS))})
	if err != nil {
		return nil, fmt.Errorf("open iterator: %w", err)
	}
	defer it.Close()
	var out []FormatRaise
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		var r FormatRaise
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, fmt.Errorf("read owed format raise %q: %w", it.Key(), err)
		}
		out = append(out, r)
	}
	return out, it.Error()
}

// RaiseRecorded forgets an owed raise once the audit trail has it.
func (s *Store) RaiseRecorded(ctx context.Context, r FormatRaise) error {
	b := s.db.NewBatch()
	_ = b.Delete(owedRaiseKey(r.To), nil)
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("forget the recorded format raise to %v: %w", r.To, err)
	}
	return nil
}

// raiseIn puts a raise of the format to "to" into b when the database is
// older, with its owed record, and returns it (nil when nothing is
// raised).
func (s *Store) raiseIn(b *pebble.Batch, to Format, reason string) (*FormatRaise, error) {
	cur, err := s.Format(context.Background())
	if err != nil {
		return nil, err
	}
	if cur >= to {
		return nil, nil
	}
	r := &FormatRaise{From: cur, To: to, Reason: reason, At: s.now().UTC()}
	return r, oweRaise(b, r)
}

// oweRaise writes the raise's format and its owed record into b.
func oweRaise(b *pebble.Batch, r *FormatRaise) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_ = b.Set([]byte(formatKey), []byte(r.To.String()), nil)
	_ = b.Set(owedRaiseKey(r.To), v, nil)
	return nil
}

// noteRaise logs a committed raise.
func (s *Store) noteRaise(r *FormatRaise) {
	if r == nil || s.log == nil {
		return
	}
	s.log.Info("database_format_raised", "from", int(r.From), "to", int(r.To), "reason", r.Reason,
		"path", s.path, "note", "releases that do not read this format refuse the database (docs/upgrading.md)")
}

// initFormat records the format of a database that has no marker: a new
// one, or one written before the marker existed. A database sealed by the
// release that introduced sealing has sealed records and no record of it;
// it is found once here and marked sealed (its key store is identified
// at the first open with the KEK, bindSealer). Later opens read the marker
// alone.
func (s *Store) initFormat(ctx context.Context) error {
	if _, ok, err := readFormat(s.db); err != nil || ok {
		return err
	}
	sealed, err := s.hasSealedContent(ctx)
	if err != nil {
		return fmt.Errorf("look for sealed content written before the format marker: %w", err)
	}
	b := s.db.NewBatch()
	if !sealed {
		_ = b.Set([]byte(formatKey), []byte(FormatBase.String()), nil)
		return s.apply(ctx, write{kind: writeState, batch: b, sync: true})
	}
	r := &FormatRaise{From: FormatBase, To: FormatSealed, Reason: "sealed content written before the format marker", At: s.now().UTC()}
	v, err := json.Marshal(sealRecord{SealedAt: r.At.UnixNano()})
	if err != nil {
		_ = b.Close()
		return err
	}
	_ = b.Set([]byte(sealKey), v, nil)
	if err := oweRaise(b, r); err != nil {
		_ = b.Close()
		return err
	}
	if err := s.apply(ctx, write{kind: writeState, batch: b, sync: true}); err != nil {
		return fmt.Errorf("mark the database sealed: %w", err)
	}
	s.noteRaise(r)
	return nil
}

// hasSealedContent reports whether any thread has a sealed record: its
// metadata, or a message in the key-number index (every sealed message's
// first version is there). One seek per thread, done once per database.
func (s *Store) hasSealedContent(ctx context.Context) (bool, error) {
	var sealed bool
	err := s.eachThread(ctx, []byte(threadNS), func(it *pebble.Iterator, tid string) (bool, error) {
		index := append(threadPrefix(tid), keyIndexSuffix...)
		if it.SeekGE(index) && bytes.HasPrefix(it.Key(), index) {
			sealed = true
			return true, nil
		}
		meta := threadMetaKey(tid)
		if it.SeekGE(meta) && bytes.Equal(it.Key(), meta) {
			v, err := it.ValueAndErr()
			if err != nil {
				return true, err
			}
			sealed = sealedThreadRecord(v)
		}
		return sealed, nil
	})
	return sealed, err
}

// sealedThreadRecord reports whether thread metadata v is sealed.
func sealedThreadRecord(v []byte) bool {
	if t, ok := fastThread(v); ok {
		return t.Sealed != ""
	}
	var t Thread
	return json.Unmarshal(v, &t) == nil && t.Sealed != ""
}

package store

import (
	"bytes"
	"context"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Sealed content (spec §12, docs/sealed-content-design.md §2): with a
// Sealer in Options, a thread's title and author and every version's
// author and body are stored as one AES-256-GCM ciphertext under the data
// key of (thread, author), the record keeping only the key's number in
// plaintext:
//
//	{"id":"t1","key":1,"sealed":"<base64>","created_ts":…,…}
//	{"id":"m1","thread":"t1","key":3,"sealed":"<base64>","ts":…,…}
//
// A record without "sealed" is plain (written before sealing, or without a
// Sealer); both shapes are read whatever the Options. A sealed record whose
// key is gone (destroyed by a thread purge or a subject erasure) reads with
// Unreadable set and its content empty: the API shows null.

// Sealer gives the data keys that seal content. *keystore.KeyStore is the
// one the server uses; the store never imports it, so that the tests of
// plain stores run without one.
type Sealer interface {
	// Key returns the author's key in thread tid and its number, creating
	// it (durably) on the author's first write there.
	Key(ctx context.Context, tid, author string) (uint32, cipher.AEAD, error)
	// KeyByNumber returns the key of that number in thread tid. A key that
	// was destroyed or never made answers an error with a method
	// KeyGone() bool that returns true (keystore.ErrNoKey).
	KeyByNumber(ctx context.Context, tid string, num uint32) (cipher.AEAD, error)
	// ID is the key store's identity ("" when it has none yet), and
	// Database the data database's identity it records ("" for none).
	ID() string
	Database() string
	// Bind records, synced, that the key store belongs to the database
	// databaseID (sealbind.go), giving it an identity if it has none.
	Bind(ctx context.Context, databaseID string) error
}

// ErrUnreadable refuses a change that needs the content of a record whose
// key was destroyed (an edit, delete or restore of an erased author's
// message in the moment before its purge, a new title for a thread whose
// creator was erased).
var ErrUnreadable = errors.New("content unreadable: the key that sealed it was destroyed")

// keyGone reports whether err says a Sealer's key is gone.
func keyGone(err error) bool {
	var g interface{ KeyGone() bool }
	return errors.As(err, &g) && g.KeyGone()
}

// Sealing reports whether the store seals new writes.
func (s *Store) Sealing() bool { return s.sealer != nil }

// Sealer returns the store's Sealer (Options.Sealer); nil when plain. The
// retention runner takes the key store from it, so that every runner over
// a sealing store shreds what it purges.
func (s *Store) Sealer() Sealer { return s.sealer }

// The associated data of a seal binds the ciphertext to its record, so
// that one copied to another thread, message, version or key number does
// not open (design §2):
//
//	"pdb-seal-1" 0 field 0 tid 0 mid 0 version(20d) 0 key(10d)
const (
	sealTag          = "pdb-seal-1"
	sealFieldThread  = "thread"
	sealFieldVersion = "version"
)

func sealAD(b []byte, field, tid, mid string, version int64, key uint32) []byte {
	b = append(b, sealTag...)
	b = append(b, 0)
	b = append(b, field...)
	b = append(b, 0)
	b = append(b, tid...)
	b = append(b, 0)
	b = append(b, mid...)
	b = append(b, 0)
	b = appendPadded(b, version)
	b = append(b, 0)
	return appendKeyNum(b, key)
}

// appendKeyNum appends a key number as 10 zero-padded digits (uint32's width).
func appendKeyNum(b []byte, num uint32) []byte {
	var digits [10]byte
	s := strconv.AppendUint(digits[:0], uint64(num), 10)
	for range 10 - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

// seal seals plain under a with the record's associated data, in base64.
func seal(a cipher.AEAD, plain, ad []byte) string {
	return base64.StdEncoding.EncodeToString(a.Seal(nil, nil, plain, ad))
}

// unseal opens what seal made; false when it does not open (another key,
// another record's seal, damage).
func unseal(a cipher.AEAD, sealed string, ad []byte) ([]byte, bool) {
	ct, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, false
	}
	plain, err := a.Open(ct[:0], nil, ct, ad)
	return plain, err == nil
}

// sealThread seals t's title and author under its creator's key: the key
// numbered t.Key when it has one (a new title), else the author's key in
// the thread, created on first use.
func (s *Store) sealThread(ctx context.Context, t *Thread) error {
	a, num, err := s.sealKey(ctx, t.ID, t.Key, t.Author)
	if err != nil {
		return fmt.Errorf("seal thread %s: %w", t.ID, err)
	}
	plain := make([]byte, 0, len(`{"title":,"author":}`)+len(t.Title)+len(t.Author)+8)
	plain = append(plain, `{"title":`...)
	plain = appendJSONString(plain, t.Title)
	plain = append(plain, `,"author":`...)
	plain = appendJSONString(plain, t.Author)
	plain = append(plain, '}')
	t.Key = num
	t.Sealed = seal(a, plain, sealAD(nil, sealFieldThread, t.ID, "", 0, num))
	clear(plain)
	return nil
}

// sealScratch holds a seal's plaintext, associated data and ciphertext
// between calls: one append seals once, and three fresh buffers per seal
// were a third of its allocations.
type sealScratch struct{ plain, ad, ct []byte }

var sealScratches = sync.Pool{New: func() any { return new(sealScratch) }}

// sealMessage seals m's author and body (compact JSON) under the key
// numbered m.Key, or the author's key when m has none yet (a new message,
// or a plain one changed after sealing was turned on).
func (s *Store) sealMessage(ctx context.Context, m *Message) error {
	a, num, err := s.sealKey(ctx, m.Thread, m.Key, m.Author)
	if err != nil {
		return fmt.Errorf("seal message %s: %w", m.ID, err)
	}
	sc := sealScratches.Get().(*sealScratch)
	defer sealScratches.Put(sc)
	plain := append(sc.plain[:0], `{"author":`...)
	plain = appendJSONString(plain, m.Author)
	plain = append(plain, `,"body":`...)
	if len(m.Body) == 0 {
		plain = append(plain, nullBody...)
	} else {
		plain = append(plain, m.Body...)
	}
	plain = append(plain, '}')
	sc.ad = sealAD(sc.ad[:0], sealFieldVersion, m.Thread, m.ID, m.Version, num)
	sc.ct = a.Seal(sc.ct[:0], nil, plain, sc.ad)
	m.Key = num
	m.Sealed = base64.StdEncoding.EncodeToString(sc.ct)
	clear(plain)
	sc.plain = plain[:0]
	return nil
}

func (s *Store) sealKey(ctx context.Context, tid string, num uint32, author string) (cipher.AEAD, uint32, error) {
	if num != 0 {
		a, err := s.sealer.KeyByNumber(ctx, tid, num)
		if keyGone(err) {
			return nil, 0, fmt.Errorf("%w: key %d of thread %s", ErrUnreadable, num, tid)
		}
		return a, num, err
	}
	num, a, err := s.sealer.Key(ctx, tid, author)
	return a, num, err
}

// openKey returns the key that opens a record of thread tid sealed under
// num; nil with no error when the key is gone (or the store has no
// Sealer): the record is unreadable.
func (s *Store) openKey(ctx context.Context, tid string, num uint32) (cipher.AEAD, error) {
	if s.sealer == nil || num == 0 {
		return nil, nil
	}
	a, err := s.sealer.KeyByNumber(ctx, tid, num)
	if keyGone(err) {
		return nil, nil
	}
	return a, err
}

// openThread fills a sealed thread's title and author, or marks it
// Unreadable. A plain thread is left as it is.
func (s *Store) openThread(ctx context.Context, t *Thread) error {
	if t.Sealed == "" {
		return nil
	}
	t.Title, t.Author = "", ""
	a, err := s.openKey(ctx, t.ID, t.Key)
	if err != nil {
		return fmt.Errorf("open thread %s: %w", t.ID, err)
	}
	if a == nil {
		t.Unreadable = true
		return nil
	}
	plain, ok := unseal(a, t.Sealed, sealAD(nil, sealFieldThread, t.ID, "", 0, t.Key))
	if !ok {
		// Another key of the same number (the thread was purged and made
		// again) or a ciphertext that is not this record's.
		t.Unreadable = true
		return nil
	}
	defer clear(plain)
	title, author, ok := cutSealedThread(plain)
	if !ok {
		return fmt.Errorf("thread %s metadata: %w: sealed content", t.ID, ErrMalformed)
	}
	t.Title, t.Author = title, author
	return nil
}

// openMessage fills a sealed version's author and body, or marks it
// Unreadable (body null). A plain version is left as it is.
func (s *Store) openMessage(ctx context.Context, m *Message) error {
	if m.Sealed == "" {
		return nil
	}
	m.Author, m.Body = "", nil
	a, err := s.openKey(ctx, m.Thread, m.Key)
	if err != nil {
		return fmt.Errorf("open message %s version %d: %w", m.ID, m.Version, err)
	}
	if a == nil {
		m.Unreadable = true
		return nil
	}
	plain, ok := unseal(a, m.Sealed, sealAD(nil, sealFieldVersion, m.Thread, m.ID, m.Version, m.Key))
	if !ok {
		m.Unreadable = true
		return nil
	}
	author, body, ok := cutSealedVersion(plain)
	if !ok {
		return fmt.Errorf("message %s version %d: %w: sealed content", m.ID, m.Version, ErrMalformed)
	}
	m.Author, m.Body = author, body
	return nil
}

// cutSealedThread reads {"title":"…","author":"…"}.
func cutSealedThread(p []byte) (title, author string, ok bool) {
	rest, ok := bytes.CutPrefix(p, []byte(`{"title":`))
	if !ok {
		return "", "", false
	}
	var t, a []byte
	if t, rest, ok = cutString(rest); !ok {
		return "", "", false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"author":`)); !ok {
		return "", "", false
	}
	if a, rest, ok = cutString(rest); !ok || string(rest) != "}" {
		return "", "", false
	}
	if title, ok = decodeString(t); !ok {
		return "", "", false
	}
	author, ok = decodeString(a)
	return title, author, ok
}

// cutSealedVersion reads {"author":"…","body":<JSON>}; the body is the
// store's own compact JSON, authenticated by the seal, so it is not
// validated again. It points into p.
func cutSealedVersion(p []byte) (author string, body json.RawMessage, ok bool) {
	rest, ok := bytes.CutPrefix(p, []byte(`{"author":`))
	if !ok {
		return "", nil, false
	}
	var a []byte
	if a, rest, ok = cutString(rest); !ok {
		return "", nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"body":`)); !ok {
		return "", nil, false
	}
	if body, ok = bytes.CutSuffix(rest, []byte("}")); !ok || len(body) == 0 {
		return "", nil, false
	}
	author, ok = decodeString(a)
	return author, body, ok
}

// appendSealed appends ,"key":N,"sealed":"<base64>".
func appendSealed(b []byte, key uint32, sealed string) []byte {
	b = append(b, `,"key":`...)
	b = strconv.AppendUint(b, uint64(key), 10)
	b = append(b, `,"sealed":"`...)
	b = append(b, sealed...)
	return append(b, '"')
}

// cutSealedField cuts ,"key":N,"sealed":"<base64>" from the front of b.
func cutSealedField(b []byte) (key uint32, sealed, rest []byte, ok bool) {
	rest, ok = bytes.CutPrefix(b, []byte(`,"key":`))
	if !ok {
		return 0, nil, nil, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	n, err := strconv.ParseUint(string(rest[:i]), 10, 32)
	if err != nil || n == 0 || (i > 1 && rest[0] == '0') {
		return 0, nil, nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[i:], []byte(`,"sealed":"`)); !ok {
		return 0, nil, nil, false
	}
	// Base64 needs no escapes in JSON: anything else is left to
	// encoding/json.
	end := 0
	for end < len(rest) && isBase64(rest[end]) {
		end++
	}
	if end == 0 || end == len(rest) || rest[end] != '"' {
		return 0, nil, nil, false
	}
	return uint32(n), rest[:end], rest[end+1:], true
}

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// plainMarkKey, thread:<tid>:plain, is written when a thread's plain
// metadata (from before sealing) is replaced by a sealed one: the plain
// record may still be in a file, so a shredded purge of the thread still
// erases its span. (A message's versions are never replaced: a plain one
// is still there to be seen.)
func plainMarkKey(tid string) []byte { return append(threadPrefix(tid), "plain"...) }

// The key-number index: thread:<tid>:key:<num 10d>:<mid>, written with
// version 1 of every sealed message. A key of the thread, so a thread
// purge deletes it with the rest; a message purge deletes its entry.
const keyIndexSuffix = "key:"

func keyIndexPrefix(tid string, num uint32) []byte {
	b := append(threadPrefix(tid), keyIndexSuffix...)
	b = appendKeyNum(b, num)
	return append(b, ':')
}

func keyIndexKey(tid string, num uint32, mid string) []byte {
	return append(keyIndexPrefix(tid, num), mid...)
}

// MessagesByKey lists, in ID order, the messages of thread tid whose first
// version was sealed under key number num: everything one author wrote in
// the thread (one key per (thread, author)), found through the key-number
// index without reading the thread. A subject erasure uses it with the
// (thread, number) pairs of keystore.AuthorKeys: its cost follows the
// author's messages, not the thread's.
func (s *Store) MessagesByKey(ctx context.Context, tid string, num uint32) ([]string, error) {
	if err := ValidateID(tid); err != nil {
		return nil, err
	}
	prefix := keyIndexPrefix(tid, num)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		return nil, fmt.Errorf("messages of key %d in thread %s: %w", num, tid, err)
	}
	defer it.Close()
	var out []string
	for valid := it.First(); valid; valid = it.Next() {
		if len(out)%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out = append(out, string(it.Key()[len(prefix):]))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("messages of key %d in thread %s: %w", num, tid, err)
	}
	return out, nil
}

package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// record is a version record of the store's own encoding (appendMessageJSON:
// id, thread, author, body, ts, version, deleted, deleted_ts, in that
// order, no spaces), cut into its parts without decoding the body: the IDs
// from the front, the numbers and the flag from the back. The slices point
// into the record.
type record struct {
	id, thread []byte
	author     []byte // the JSON string, quotes included
	body       []byte // one valid JSON value
	key        uint32 // sealed: the key number, and the base64 of the seal
	sealed     []byte
	ts         int64
	version    int64
	deleted    bool
	deletedTS  int64
}

// cutRecord answers ok only for a record of exactly that shape whose every
// part is valid JSON, for which encoding/json would decode the same
// values; anything else (legacy or damaged records) is left to
// encoding/json. Decoding every message's oldest and newest version with
// encoding/json was a quarter of a purge's CPU time, and decoding a page's
// messages most of a read's.
func cutRecord(d []byte) (record, bool) {
	var r record
	rest, ok := bytes.CutPrefix(d, []byte(`{"id":"`))
	if !ok {
		return r, false
	}
	if r.id, rest, ok = plainString(rest); !ok {
		return r, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"thread":"`)); !ok {
		return r, false
	}
	if r.thread, rest, ok = plainString(rest); !ok {
		return r, false
	}

	// The fixed tail: ,"ts":N,"version":N,"deleted":B,"deleted_ts":N}
	if rest, ok = bytes.CutSuffix(rest, []byte("}")); !ok {
		return r, false
	}
	if rest, r.deletedTS, ok = cutInt(rest, `,"deleted_ts":`); !ok {
		return r, false
	}
	if rest, r.deleted, ok = cutBool(rest, `,"deleted":`); !ok {
		return r, false
	}
	if rest, r.version, ok = cutInt(rest, `,"version":`); !ok {
		return r, false
	}
	if rest, r.ts, ok = cutInt(rest, `,"ts":`); !ok {
		return r, false
	}

	// What is left is ,"author":"...","body":<one JSON value>, or
	// ,"key":N,"sealed":"<base64>" in a sealed record.
	if k, sealed, after, ok := cutSealedField(rest); ok {
		if len(after) != 0 {
			return r, false
		}
		r.key, r.sealed = k, sealed
		return r, true
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"author":`)); !ok {
		return r, false
	}
	if r.author, rest, ok = cutString(rest); !ok {
		return r, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"body":`)); !ok || !json.Valid(rest) {
		return r, false
	}
	r.body = rest
	return r, true
}

// cutString cuts a valid JSON string (quotes included) from the front of b.
func cutString(b []byte) (str, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	end, plain := 1, true
	for end < len(b) && b[end] != '"' {
		if c := b[end]; c == '\\' {
			end++
			plain = false
		} else if c < 0x20 {
			plain = false
		}
		end++
	}
	// A string without escapes or control characters is valid JSON as it is.
	if end >= len(b) || (!plain && !json.Valid(b[:end+1])) {
		return nil, nil, false
	}
	return b[:end+1], b[end+1:], true
}

// decodeString decodes a string cutString cut, as encoding/json would.
func decodeString(str []byte) (string, bool) {
	if s := str[1 : len(str)-1]; plainText(s) {
		return string(s), true
	}
	var s string
	return s, json.Unmarshal(str, &s) == nil
}

// fastHead reads a version's head through cutRecord.
func fastHead(d []byte) (versionHead, bool) {
	r, ok := cutRecord(d)
	if !ok || len(r.thread) == 0 {
		return versionHead{}, false
	}
	return versionHead{Thread: string(r.thread), TS: r.ts, Deleted: r.deleted, DeletedTS: r.deletedTS, Key: r.key}, true
}

// fastMessage reads a whole version through cutRecord, as encoding/json
// would into a Message; the body is copied out of d.
func fastMessage(d []byte) (Message, bool) {
	r, ok := cutRecord(d)
	if !ok {
		return Message{}, false
	}
	m := Message{
		ID: string(r.id), Thread: string(r.thread),
		TS: r.ts, Version: r.version, Deleted: r.deleted, DeletedTS: r.deletedTS,
	}
	if r.sealed != nil {
		m.Key, m.Sealed = r.key, string(r.sealed)
		return m, true
	}
	m.Body = bytes.Clone(r.body)
	if m.Author, ok = decodeString(r.author); !ok {
		return Message{}, false
	}
	return m, true
}

// fastThread reads thread metadata of the store's own encoding
// (appendThreadJSON) as encoding/json would, and answers ok only for a
// record of exactly that shape: every append and every read of a thread's
// messages reads its thread first.
func fastThread(d []byte) (Thread, bool) {
	var t Thread
	rest, ok := bytes.CutPrefix(d, []byte(`{"id":"`))
	if !ok {
		return t, false
	}
	var id, title, author, sealed []byte
	if id, rest, ok = plainString(rest); !ok {
		return t, false
	}
	if k, s, after, isSealed := cutSealedField(rest); isSealed {
		t.Key, sealed, rest = k, s, after
	} else {
		if rest, ok = bytes.CutPrefix(rest, []byte(`,"title":`)); !ok {
			return t, false
		}
		if title, rest, ok = cutString(rest); !ok {
			return t, false
		}
		if rest, ok = bytes.CutPrefix(rest, []byte(`,"author":`)); !ok {
			return t, false
		}
		if author, rest, ok = cutString(rest); !ok {
			return t, false
		}
	}
	// The fixed tail, from the back:
	// ,"created_ts":N,"updated_ts":N,"deleted":B,"deleted_ts":N,"legal_hold":B}
	if rest, ok = bytes.CutSuffix(rest, []byte("}")); !ok {
		return t, false
	}
	if rest, t.LegalHold, ok = cutBool(rest, `,"legal_hold":`); !ok {
		return t, false
	}
	if rest, t.DeletedTS, ok = cutInt(rest, `,"deleted_ts":`); !ok {
		return t, false
	}
	if rest, t.Deleted, ok = cutBool(rest, `,"deleted":`); !ok {
		return t, false
	}
	if rest, t.UpdatedTS, ok = cutInt(rest, `,"updated_ts":`); !ok {
		return t, false
	}
	if rest, t.CreatedTS, ok = cutInt(rest, `,"created_ts":`); !ok || len(rest) != 0 {
		return t, false
	}
	t.ID = string(id)
	if sealed != nil {
		t.Sealed = string(sealed)
		return t, true
	}
	if t.Title, ok = decodeString(title); !ok {
		return t, false
	}
	if t.Author, ok = decodeString(author); !ok {
		return t, false
	}
	return t, true
}

// cutBool cuts name followed by true or false from the end of b.
func cutBool(b []byte, name string) ([]byte, bool, bool) {
	if rest, ok := bytes.CutSuffix(b, []byte(name+"true")); ok {
		return rest, true, true
	}
	rest, ok := bytes.CutSuffix(b, []byte(name+"false"))
	return rest, false, ok
}

// plainText reports whether s, inside a JSON string, reads as itself:
// valid UTF-8 without escapes or control characters.
func plainText(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '\\' || c == '"' {
			return false
		}
	}
	return utf8.Valid(s)
}

// plainString reads a JSON string body (after its opening quote) made of
// printable ASCII without escapes, as IDs are, and returns it with what
// follows its closing quote.
func plainString(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		switch {
		case c == '"':
			return b[:i], b[i+1:], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// cutInt cuts name followed by a JSON integer from the end of b.
func cutInt(b []byte, name string) ([]byte, int64, bool) {
	j := len(b)
	for j > 0 && b[j-1] >= '0' && b[j-1] <= '9' {
		j--
	}
	digits := b[j:]
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return b, 0, false // JSON allows no leading zeros
	}
	if j > 0 && b[j-1] == '-' {
		j--
	}
	n, err := strconv.ParseInt(string(b[j:]), 10, 64)
	if err != nil {
		return b, 0, false
	}
	rest, ok := bytes.CutSuffix(b[:j], []byte(name))
	return rest, n, ok
}

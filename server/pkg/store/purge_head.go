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
	if cut, found := bytes.CutSuffix(rest, []byte(`,"deleted":true`)); found {
		r.deleted, rest = true, cut
	} else if rest, ok = bytes.CutSuffix(rest, []byte(`,"deleted":false`)); !ok {
		return r, false
	}
	if rest, r.version, ok = cutInt(rest, `,"version":`); !ok {
		return r, false
	}
	if rest, r.ts, ok = cutInt(rest, `,"ts":`); !ok {
		return r, false
	}

	// What is left is ,"author":"...","body":<one JSON value>.
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"author":`)); !ok || len(rest) == 0 || rest[0] != '"' {
		return r, false
	}
	end, plain := 1, true
	for end < len(rest) && rest[end] != '"' {
		if c := rest[end]; c == '\\' {
			end++
			plain = false
		} else if c < 0x20 {
			plain = false
		}
		end++
	}
	// A string without escapes or control characters is valid JSON as it is.
	if end >= len(rest) || (!plain && !json.Valid(rest[:end+1])) {
		return r, false
	}
	r.author = rest[:end+1]
	if rest, ok = bytes.CutPrefix(rest[end+1:], []byte(`,"body":`)); !ok || !json.Valid(rest) {
		return r, false
	}
	r.body = rest
	return r, true
}

// fastHead reads a version's head through cutRecord.
func fastHead(d []byte) (versionHead, bool) {
	r, ok := cutRecord(d)
	if !ok || len(r.thread) == 0 {
		return versionHead{}, false
	}
	return versionHead{Thread: string(r.thread), TS: r.ts, Deleted: r.deleted, DeletedTS: r.deletedTS}, true
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
		Body: bytes.Clone(r.body),
		TS:   r.ts, Version: r.version, Deleted: r.deleted, DeletedTS: r.deletedTS,
	}
	if a := r.author[1 : len(r.author)-1]; plainText(a) {
		m.Author = string(a)
	} else if json.Unmarshal(r.author, &m.Author) != nil {
		return Message{}, false
	}
	return m, true
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

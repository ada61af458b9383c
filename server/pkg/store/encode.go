package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The records are encoded by hand: every write and every seeded message
// goes through here, and reflection-based encoding was the largest cost of
// a bulk load. The output is the JSON encoding/json reads back into the
// same struct (the fuzz test checks the round trip). A sealed record
// (seal.go) has "key" and "sealed" in place of its content.

func appendThreadJSON(b []byte, t Thread) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, t.ID)
	if t.Sealed != "" {
		b = appendSealed(b, t.Key, t.Sealed)
	} else {
		b = append(b, `,"title":`...)
		b = appendJSONString(b, t.Title)
		b = append(b, `,"author":`...)
		b = appendJSONString(b, t.Author)
	}
	b = append(b, `,"created_ts":`...)
	b = strconv.AppendInt(b, t.CreatedTS, 10)
	b = append(b, `,"updated_ts":`...)
	b = strconv.AppendInt(b, t.UpdatedTS, 10)
	b = append(b, `,"deleted":`...)
	b = strconv.AppendBool(b, t.Deleted)
	b = append(b, `,"deleted_ts":`...)
	b = strconv.AppendInt(b, t.DeletedTS, 10)
	b = append(b, `,"legal_hold":`...)
	b = strconv.AppendBool(b, t.LegalHold)
	return append(b, '}')
}

// appendMessageJSON encodes m; m.Body must already be valid, compact JSON
// (see compactBody).
func appendMessageJSON(b []byte, m Message) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, m.ID)
	b = append(b, `,"thread":`...)
	b = appendJSONString(b, m.Thread)
	if m.Sealed != "" {
		b = appendSealed(b, m.Key, m.Sealed)
	} else {
		b = append(b, `,"author":`...)
		b = appendJSONString(b, m.Author)
		b = append(b, `,"body":`...)
		if len(m.Body) == 0 {
			b = append(b, nullBody...)
		} else {
			b = append(b, m.Body...)
		}
	}
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, m.TS, 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, m.Version, 10)
	b = append(b, `,"deleted":`...)
	b = strconv.AppendBool(b, m.Deleted)
	b = append(b, `,"deleted_ts":`...)
	b = strconv.AppendInt(b, m.DeletedTS, 10)
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Control characters are
// escaped and invalid UTF-8 becomes U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// compactBody checks that body is JSON and returns it without insignificant
// whitespace; an empty body is null. A body that has none (what clients
// send) is returned as it is, checked but not copied.
func compactBody(body json.RawMessage) (json.RawMessage, error) {
	if len(body) == 0 {
		return nullBody, nil
	}
	if !spaced(body) {
		if !json.Valid(body) {
			return nil, fmt.Errorf("%w: body is not valid JSON", ErrInvalidArgument)
		}
		return body, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(body))
	if err := json.Compact(&buf, body); err != nil {
		return nil, fmt.Errorf("%w: body is not valid JSON", ErrInvalidArgument)
	}
	return buf.Bytes(), nil
}

// spaced reports whether JSON text b may hold whitespace outside its
// strings (json.Compact would remove it). Invalid text may answer either.
func spaced(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return true
		}
	}
	return false
}

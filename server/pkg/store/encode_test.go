package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRecordEncoding checks the hand-written encoders against encoding/json:
// what they write must be valid JSON that decodes to exactly what
// encoding/json's own encoding of the same record decodes to.
func FuzzRecordEncoding(f *testing.F) {
	f.Add("t1", "hello", "ana", int64(1), int64(-1), true, []byte(`{"text":"hi"}`))
	f.Add("x", "quote \" backslash \\ newline \n tab \t nul \x00", "\u2028<&>", int64(0), int64(1<<62), false, []byte(`null`))
	f.Add("z", "", "", int64(2), int64(3), false, []byte(`{"a":"b \" c","d":[1,2]}`))
	f.Add("w", "", "", int64(2), int64(3), false, []byte(`{"a":"x\\","b" :1}`))
	f.Add("v", "", "", int64(2), int64(3), false, []byte(`{"a":1}}`))
	f.Add("y", "bad utf8 \xff\xfe end", "é漢字😀", int64(-5), int64(0), true, []byte(` [ 1 , "two" , {"3" : null} ] `))
	f.Fuzz(func(t *testing.T, id, title, author string, ts, deletedTS int64, deleted bool, body []byte) {
		th := Thread{ID: id, Title: title, Author: author, CreatedTS: ts, UpdatedTS: ts + 1, Deleted: deleted, DeletedTS: deletedTS, LegalHold: !deleted}
		sameAsStdlib(t, appendThreadJSON(nil, th), th)

		compact, err := compactBody(body)
		// Bodies without whitespace skip json.Compact: the result must
		// still be json.Compact's, byte for byte, and refuse what it refuses.
		var std bytes.Buffer
		if stdErr := json.Compact(&std, body); len(body) > 0 && (stdErr == nil) != (err == nil) {
			t.Fatalf("compactBody(%q) error %v, json.Compact's %v", body, err, stdErr)
		} else if err == nil && len(body) > 0 && !bytes.Equal(compact, std.Bytes()) {
			t.Fatalf("compactBody(%q) = %q, json.Compact's %q", body, compact, std.Bytes())
		}
		if err != nil {
			return
		}
		m := Message{ID: id, Thread: author, Author: title, Body: compact, TS: ts, Version: deletedTS, Deleted: deleted, DeletedTS: deletedTS}
		sameAsStdlib(t, appendMessageJSON(nil, m), m)
	})
}

// sameAsStdlib compares after decoding; message bodies are compared as
// JSON values (encoding/json re-escapes '&', '<' and '>' inside them).
func sameAsStdlib[T any](t *testing.T, ours []byte, v T) {
	t.Helper()
	if !json.Valid(ours) {
		t.Fatalf("invalid JSON: %s", ours)
	}
	std, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got, want T
	if err := json.Unmarshal(ours, &got); err != nil {
		t.Fatalf("decode %s: %v", ours, err)
	}
	if err := json.Unmarshal(std, &want); err != nil {
		t.Fatal(err)
	}
	if g, ok := any(&got).(*Message); ok {
		w := any(&want).(*Message)
		gb, gerr := decodeNumbers(g.Body)
		wb, werr := decodeNumbers(w.Body)
		if gerr != nil || werr != nil || !reflect.DeepEqual(gb, wb) {
			t.Fatalf("bodies differ: %s and %s (%v, %v)", g.Body, w.Body, gerr, werr)
		}
		g.Body, w.Body = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("hand-written encoding decodes to %+v\nencoding/json's to %+v\nours: %s\nstd:  %s", got, want, ours, std)
	}
}

// decodeNumbers decodes a JSON value keeping numbers as written: a body
// may hold numbers beyond float64's range, which are still valid JSON.
func decodeNumbers(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func TestEmptyBodyIsNull(t *testing.T) {
	b, err := compactBody(nil)
	if err != nil || string(b) != "null" {
		t.Fatalf("compactBody(nil) = %s, %v", b, err)
	}
	if _, err := compactBody(json.RawMessage(`{"a":1} x`)); err == nil {
		t.Fatal("trailing garbage accepted")
	}
	m := appendMessageJSON(nil, Message{ID: "m", Thread: "t"})
	if !json.Valid(m) {
		t.Fatalf("message without body encodes to %s", m)
	}
}

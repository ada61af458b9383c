package api

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// FuzzAppendRequest holds the append body's one-pass decoder to
// encoding/json's: whatever it accepts, decodeJSON accepts too and reads
// into the same fields; what it gives up on is left to decodeJSON.
func FuzzAppendRequest(f *testing.F) {
	for _, s := range []string{
		`{"author":"ana","body":{"text":"hi"}}`,
		`{"id":"m1","author":"ana","body":"plain"}`,
		` { "body" : [1, {"a":"}"}, "x\"y"] , "author" : "b" } `,
		`{"body":null,"author":"a"}`,
		`{"body":12.5e3,"author":"a","id":"x"}`,
		`{"body":true}`,
		`{}`,
		`{"Author":"ana","body":1}`,
		`{"author":"ana","author":"bob","body":1}`,
		`{"author":"a\u00e9","body":1}`,
		`{"author":5,"body":1}`,
		`{"author":"ana","body":1} {}`,
		`{"author":"ana","body":1,"x":2}`,
		`[1]`,
		`"body"`,
		`{"body":{"a":[{"b":"]"}]},"author":"z"}`,
		`{"body":"\\","author":"q"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !utf8.Valid(data) {
			return // readBody refuses it before either decoder
		}
		var fast appendRequest
		if !fastAppendRequest(data, &fast) {
			return
		}
		var std appendRequest
		if err := decodeJSON(data, &std, false); err != nil {
			t.Fatalf("fast decoder accepted %q, encoding/json refuses it: %v", data, err)
		}
		if fast.ID != std.ID || fast.Author != std.Author || !bytes.Equal(fast.Body, std.Body) {
			t.Fatalf("%q: fast decoder read %q %q %q, encoding/json %q %q %q",
				data, fast.ID, fast.Author, fast.Body, std.ID, std.Author, std.Body)
		}
	})
}

// The common shape takes the fast path: otherwise the fuzz test above
// would hold nothing.
func TestFastAppendRequestTakesCommonBodies(t *testing.T) {
	for _, s := range []string{
		`{"author":"ana","body":{"text":"hi"}}`,
		`{"id":"m1","author":"ana","body":"plain"}`,
		"{\n  \"author\": \"ana\",\n  \"body\": [1, 2]\n}\n",
	} {
		var req appendRequest
		if !fastAppendRequest([]byte(s), &req) || req.Author != "ana" || len(req.Body) == 0 {
			t.Errorf("%q: fast path not taken or wrong: %+v", s, req)
		}
	}
}

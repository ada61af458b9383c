package store

import (
	"encoding/json"
	"reflect"
	"testing"
)

// headByJSON is decodeHead's reference: encoding/json on the whole record.
func headByJSON(data []byte) (versionHead, bool) {
	var h versionHead
	if json.Unmarshal(data, &h) != nil || h.Thread == "" {
		return versionHead{}, false
	}
	return h, true
}

func TestFastHeadReadsTheStoresEncoding(t *testing.T) {
	for _, m := range []Message{
		{ID: "m1", Thread: "t1", Author: "ann", Body: json.RawMessage(`{"text":"hi"}`), TS: 5, Version: 1},
		{ID: "m2", Thread: "t.2-x", Author: "quote \" and \\ and \u00e9", Body: json.RawMessage(`[1,"}",{"a":null}]`),
			TS: 1 << 62, Version: 3, Deleted: true, DeletedTS: 1700000000000000000},
		{ID: "m3", Thread: "t3", Body: nil, TS: 0, Version: 1},
		{ID: "m4", Thread: "t4", Author: "", Body: json.RawMessage(`"a string body with \"deleted\":true}"`), TS: -1},
	} {
		body, err := compactBody(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		m.Body = body
		data := appendMessageJSON(nil, m)
		got, ok := fastHead(data)
		if !ok {
			t.Fatalf("fastHead refused the store's own encoding %s", data)
		}
		want, _ := headByJSON(data)
		if got != want {
			t.Fatalf("fastHead(%s) = %+v, encoding/json reads %+v", data, got, want)
		}
	}
}

func TestFastHeadLeavesOtherShapesToJSON(t *testing.T) {
	for _, data := range []string{
		``,
		`{}`,
		`{"thread":"t","id":"m","author":"a","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m", "thread":"t","author":"a","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a","body":1,"ts":01,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a","body":{,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a","body":1},"thread":"u","ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t\u0041","author":"a","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"","author":"a","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a` + "\n" + `","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a","body":1,"ts":1,"version":1,"deleted":maybe,"deleted_ts":0}`,
		`{"id":"m","thread":"t","author":"a","body":1,"ts":1,"version":1,"deleted":false,"deleted_ts":99999999999999999999}`,
	} {
		if h, ok := fastHead([]byte(data)); ok {
			t.Errorf("fastHead accepted %s as %+v; it is not the store's encoding", data, h)
		}
	}
}

// FuzzFastHead checks that whatever fastHead accepts, encoding/json reads
// the same way.
func FuzzFastHead(f *testing.F) {
	f.Add([]byte(`{"id":"m","thread":"t","author":"a","body":{"x":[1,2]},"ts":12,"version":2,"deleted":true,"deleted_ts":34}`))
	f.Add([]byte(`{"id":"m","thread":"t","author":"a\"b","body":"}","ts":-1,"version":1,"deleted":false,"deleted_ts":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := fastHead(data)
		if !ok {
			return
		}
		want, wantOK := headByJSON(data)
		if !wantOK || got != want {
			t.Fatalf("fastHead(%q) = %+v; encoding/json: %+v, %v", data, got, want, wantOK)
		}
	})
}

// FuzzFastMessage checks that whatever fastMessage accepts, encoding/json
// reads into the same Message, and that it accepts the store's own
// encoding of any message.
func FuzzFastMessage(f *testing.F) {
	f.Add([]byte(`{"id":"m","thread":"t","author":"a","body":{"x":[1,2]},"ts":12,"version":2,"deleted":true,"deleted_ts":34}`), "a", []byte(`{"x":1}`))
	f.Add([]byte(`{"id":"m","thread":"t","author":"a\"b","body":"}","ts":-1,"version":1,"deleted":false,"deleted_ts":0}`), "\u00e9\xff\n", []byte(`null`))
	f.Add([]byte(`{"id":"m","thread":"t","author":"a","body":null,"ts":1,"version":1,"deleted":false,"deleted_ts":0}`), "<&>", []byte(` [ "a b" , 1 ] `))
	f.Fuzz(func(t *testing.T, data []byte, author string, body []byte) {
		if got, ok := fastMessage(data); ok {
			var want Message
			if err := json.Unmarshal(data, &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("fastMessage(%q) = %+v; encoding/json: %+v, %v", data, got, want, err)
			}
		}
		cb, err := compactBody(body)
		if err != nil {
			return
		}
		m := Message{ID: "m1", Thread: "t1", Author: author, Body: cb, TS: 7, Version: 2, DeletedTS: -3}
		data = appendMessageJSON(nil, m)
		got, ok := fastMessage(data)
		var want Message
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("the store's encoding %q does not decode: %v", data, err)
		}
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("fastMessage(%q) = %+v, %v; encoding/json: %+v", data, got, ok, want)
		}
	})
}

// FuzzFastThread checks that whatever fastThread accepts, encoding/json
// reads into the same Thread, and that it accepts the store's own encoding
// of any thread.
func FuzzFastThread(f *testing.F) {
	f.Add([]byte(`{"id":"t","title":"x","author":"a","created_ts":1,"updated_ts":2,"deleted":true,"deleted_ts":3,"legal_hold":false}`), "a \"title\"", "\u00e9\xff\n<&>")
	f.Add([]byte(`{"id":"t","title":"x","author":"a","created_ts":1,"updated_ts":2,"deleted":false,"deleted_ts":0,"legal_hold":true,"x":1}`), "", "")
	f.Fuzz(func(t *testing.T, data []byte, title, author string) {
		if got, ok := fastThread(data); ok {
			var want Thread
			if err := json.Unmarshal(data, &want); err != nil || got != want {
				t.Fatalf("fastThread(%q) = %+v; encoding/json: %+v, %v", data, got, want, err)
			}
		}
		th := Thread{ID: "t1", Title: title, Author: author, CreatedTS: 5, UpdatedTS: -6, Deleted: true, DeletedTS: 1 << 62, LegalHold: true}
		data = appendThreadJSON(nil, th)
		got, ok := fastThread(data)
		var want Thread
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("the store's encoding %q does not decode: %v", data, err)
		}
		if !ok || got != want {
			t.Fatalf("fastThread(%q) = %+v, %v; encoding/json: %+v", data, got, ok, want)
		}
	})
}

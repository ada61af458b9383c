package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// Times on the wire are the audit files' times: one formatter, UTC
// whatever the time's zone, null when unset.
func TestTimeEncoding(t *testing.T) {
	east := time.FixedZone("east", 5*3600)
	at := time.Date(2026, 11, 24, 21, 40, 19, 123456789, east)
	for _, tc := range []struct {
		in   Time
		want string
	}{
		{At(at), `"2026-11-24T16:40:19.123456789Z"`},
		{At(time.Date(2026, 11, 24, 16, 40, 19, 120000000, time.UTC)), `"2026-11-24T16:40:19.12Z"`},
		{Nanos(at.UnixNano()), `"2026-11-24T16:40:19.123456789Z"`},
		{Nanos(0), `null`},
		{Time{}, `null`},
	} {
		b, err := json.Marshal(tc.in)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.in.Time, b, err, tc.want)
		}
		if !tc.in.IsZero() && string(b) != `"`+string(audit.AppendTime(nil, tc.in.Time))+`"` {
			t.Errorf("%s is not what audit files write", b)
		}
		var back Time
		if err := json.Unmarshal(b, &back); err != nil || !back.Equal(tc.in.Time) || (!back.IsZero() && back.Location() != time.UTC) {
			t.Errorf("Unmarshal(%s) = %v, %v", b, back.Time, err)
		}
	}
	for _, bad := range []string{`1764002419123456789`, `"2026-11-24"`, `"2026-11-24T21:40:19+05:00"`, `true`} {
		var v Time
		if err := json.Unmarshal([]byte(bad), &v); !errors.Is(err, audit.ErrTimeFormat) {
			t.Errorf("Unmarshal(%s): %v, want ErrTimeFormat", bad, err)
		}
	}
}

func TestThreadAndMessage(t *testing.T) {
	ns := time.Date(2026, 11, 24, 16, 40, 19, 123456789, time.UTC).UnixNano()
	b, err := json.Marshal(ThreadOf(store.Thread{ID: "t1", Title: "x", Author: "a", CreatedTS: ns, UpdatedTS: ns}))
	want := `{"id":"t1","title":"x","author":"a","created_ts":"2026-11-24T16:40:19.123456789Z","updated_ts":"2026-11-24T16:40:19.123456789Z","deleted":false,"deleted_ts":null,"legal_hold":false}`
	if err != nil || string(b) != want {
		t.Errorf("thread: %s, %v\nwant %s", b, err, want)
	}
	b, err = json.Marshal(MessageOf(store.Message{ID: "m1", Thread: "t1", Author: "a", Body: json.RawMessage(`{"n":1}`), TS: ns, Version: 2, Deleted: true, DeletedTS: ns, CreatedTS: ns - 1}))
	want = `{"id":"m1","thread":"t1","author":"a","body":{"n":1},"created_ts":"2026-11-24T16:40:19.123456788Z","ts":"2026-11-24T16:40:19.123456789Z","version":2,"deleted":true,"deleted_ts":"2026-11-24T16:40:19.123456789Z"}`
	if err != nil || string(b) != want {
		t.Errorf("message: %s, %v\nwant %s", b, err, want)
	}
	if got := Threads(nil); got == nil {
		t.Error("Threads(nil) is nil: a list would encode as null")
	}
}

func TestCheckIJSON(t *testing.T) {
	for _, ok := range []string{`1`, `-9007199254740991`, `9007199254740991`, `{"a":[1.5,-2e10,"x",null,true]}`, `1e15`,
		`"9007199254740993"`, ` { "a" : [ ] , "b" : { } } `, `-0`, `0.0000000000000000000001`, `9007199254740991.0`,
		`{"k\"ey":1,"k\\ey":2}`, `{"a":{"a":{"a":1}}}`, `[{"a":1},{"a":2}]`} {
		if err := CheckIJSON([]byte(ok)); err != nil {
			t.Errorf("CheckIJSON(%s): %v", ok, err)
		}
	}
	for in, where := range map[string]string{
		`9007199254740992`:                    "the value",
		`{"a":{"b/c":[0,-9007199254740993]}}`: "/a/b~1c/1",
		`[1e400]`:                             "/0",
		`{"n":9.1e15}`:                        "/n",
		`{"a":1,"a":2}`:                       "the value",
		`{"x":{"a":1,"b":{},"a":2}}`:          "/x",
		`{"a":1,"\u0061":2}`:                  "the value",
		`[123456789012345678]`:                "/0",
		`{"a":[{"b":1e16}]}`:                  "/a/0/b",
		`{"k0":0,"k1":0,"k2":0,"k3":0,"k4":0,"k5":0,"k6":0,"k7":0,"k8":0,"k9":0,"k10":0,"k11":0,"k12":0,"k13":0,"k14":0,"k15":0,"k16":0,"k17":0,"k3":1}`: "the value",
		`{"a":}`: "invalid JSON",
		`[1,]`:   "invalid JSON",
		`[1] 2`:  "invalid JSON",
	} {
		err := CheckIJSON([]byte(in))
		if !errors.Is(err, ErrNotIJSON) {
			t.Errorf("CheckIJSON(%s) = %v, want ErrNotIJSON", in, err)
			continue
		}
		if got := err.Error(); !strings.Contains(got, where) {
			t.Errorf("CheckIJSON(%s) = %q, want it to name %s", in, got, where)
		}
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub))
}

// BenchmarkCheckIJSON: the check every message body goes through on
// append and edit, on a typical chat body and on a large nested one.
func BenchmarkCheckIJSON(b *testing.B) {
	small := []byte(`{"text":"see you at the standup tomorrow, I'll bring the notes","mentions":["ann","bob"],"reply_to":null}`)
	var sb strings.Builder
	sb.WriteString(`{"rows":[`)
	for i := range 5000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"id":12345,"score":0.75,"tags":["a","b"],"text":"some words of text here"}`)
	}
	sb.WriteString(`]}`)
	large := []byte(sb.String())
	for _, c := range []struct {
		name string
		body []byte
	}{{"small", small}, {"large", large}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := CheckIJSON(c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// AppendMessage writes what encoding/json writes for MessageOf, byte for
// byte, whatever the strings and the body hold.
func FuzzAppendMessage(f *testing.F) {
	f.Add("m1", "t1", "ann", []byte(`{"text":"a b"}`), int64(1764002419123456789), int64(2), false, int64(0))
	f.Add("m2", "t-2", "<b>&\u2028\"\\\n\x01\xff", []byte(` { "a" : [1, "<&>\u2029", {"b":null}] } `), int64(0), int64(1), true, int64(-5))
	f.Add("", "", "", []byte(nil), int64(-1), int64(0), true, int64(1))
	f.Add("m", "t", "é", []byte(`"\"\\ \u0041"`), int64(1), int64(1<<53), false, int64(1<<62))
	f.Fuzz(func(t *testing.T, id, thread, author string, body []byte, ts, version int64, deleted bool, deletedTS int64) {
		if len(body) > 0 && !json.Valid(body) {
			return // the store holds valid bodies only
		}
		// created_ts is derived: another argument would void the corpus.
		m := store.Message{ID: id, Thread: thread, Author: author, Body: body, TS: ts, Version: version, Deleted: deleted, DeletedTS: deletedTS,
			CreatedTS: ts - version}
		want, err := json.Marshal(MessageOf(m))
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendMessage([]byte("x"), m)
		if err != nil || string(got[1:]) != string(want) || got[0] != 'x' {
			t.Fatalf("AppendMessage = %s, %v\nencoding/json: %s", got, err, want)
		}
		list, err := AppendMessages(nil, []store.Message{m, m})
		wantList, _ := json.Marshal(Messages([]store.Message{m, m}))
		if err != nil || string(list) != string(wantList) {
			t.Fatalf("AppendMessages = %s, %v\nencoding/json: %s", list, err, wantList)
		}
	})
}

func TestAppendMessagesEmpty(t *testing.T) {
	got, err := AppendMessages(nil, nil)
	if want, _ := json.Marshal(Messages(nil)); err != nil || string(got) != string(want) {
		t.Errorf("AppendMessages(nil) = %s, %v; want %s", got, err, want)
	}
}

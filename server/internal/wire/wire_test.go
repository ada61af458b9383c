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
	b, err = json.Marshal(MessageOf(store.Message{ID: "m1", Thread: "t1", Author: "a", Body: json.RawMessage(`{"n":1}`), TS: ns, Version: 2, Deleted: true, DeletedTS: ns}))
	want = `{"id":"m1","thread":"t1","author":"a","body":{"n":1},"ts":"2026-11-24T16:40:19.123456789Z","version":2,"deleted":true,"deleted_ts":"2026-11-24T16:40:19.123456789Z"}`
	if err != nil || string(b) != want {
		t.Errorf("message: %s, %v\nwant %s", b, err, want)
	}
	if got := Threads(nil); got == nil {
		t.Error("Threads(nil) is nil: a list would encode as null")
	}
}

func TestCheckIJSON(t *testing.T) {
	for _, ok := range []string{`1`, `-9007199254740991`, `9007199254740991`, `{"a":[1.5,-2e10,"x",null,true]}`, `1e15`, `"9007199254740993"`} {
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
	} {
		err := CheckIJSON([]byte(in))
		if !errors.Is(err, ErrNotIJSON) {
			t.Errorf("CheckIJSON(%s) = %v, want ErrNotIJSON", in, err)
			continue
		}
		if got := err.Error(); !strings.Contains(got, where+":") {
			t.Errorf("CheckIJSON(%s) = %q, want it to name %s", in, got, where)
		}
	}
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub))
}

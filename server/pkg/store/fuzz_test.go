package store

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

// idPattern is the ID rule of spec §2, as a regular expression: the
// reference ValidateID must agree with.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FuzzValidateID checks that ValidateID never panics, accepts exactly the
// IDs the rule's regular expression matches, and that every rejection
// wraps ErrInvalidID and quotes the rule.
func FuzzValidateID(f *testing.F) {
	for _, id := range []string{"a", "A.b_c-d", "0", strings.Repeat("z", 128), strings.Repeat("z", 129),
		"", ".a", "-a", "_a", "a:b", "a/b", "a b", "é", "a\x00", "a\n", "\xff", "01JD2W8Q5V3K9T7M6X4B1N0PZC"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateID(id)
		if want := idPattern.MatchString(id); (err == nil) != want {
			t.Fatalf("ValidateID(%q) = %v; the rule %s says valid=%t", id, err, idRule, want)
		}
		if err != nil && (!errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), idRule)) {
			t.Fatalf("ValidateID(%q) = %v; want an error wrapping ErrInvalidID that quotes the rule", id, err)
		}
	})
}

// FuzzKeys checks, for two distinct valid IDs a and b, that the key ranges
// the store reads and deletes for a (thread:a: up to its bound,
// version:msg:a: up to its bound) hold none of b's keys, as thread or as
// message, and that every key parses back to the ID and numbers it was
// built from. This is the invariant of spec §2 that makes a purge of a
// delete exactly a's keys.
func FuzzKeys(f *testing.F) {
	f.Add("t1", "t10", "m1", int64(1), int64(1_700_000_000_000_000_000))
	f.Add("a", "a.x", "a-1", int64(0), int64(0))
	f.Add("A_", "A", "b", int64(99), int64(-5))
	f.Add(strings.Repeat("q", 128), strings.Repeat("q", 127), "z9", int64(1<<62), int64(1<<62))
	f.Fuzz(func(t *testing.T, a, b, mid string, version, ts int64) {
		if a == b || ValidateID(a) != nil || ValidateID(b) != nil || ValidateID(mid) != nil {
			return
		}
		// Every key of b, as a thread (with message mid) and as a message.
		keysOfB := [][]byte{
			threadMetaKey(b),
			logKey(b, ts, mid),
			versionKey(b, version),
		}
		ranges := []struct {
			name     string
			from, to []byte
		}{
			{"thread " + a, threadPrefix(a), threadEnd(a)},
			{"messages of thread " + a, logPrefix(a), upperBound(logPrefix(a))},
			{"versions of message " + a, versionPrefix(a), versionEnd(a)},
		}
		for _, r := range ranges {
			if !bytes.HasPrefix(r.to, r.from[:len(r.from)-1]) || bytes.Compare(r.from, r.to) >= 0 {
				t.Fatalf("range of %s is [%q, %q): not a prefix range", r.name, r.from, r.to)
			}
			for _, k := range keysOfB {
				if bytes.Compare(k, r.from) >= 0 && bytes.Compare(k, r.to) < 0 {
					t.Fatalf("key %q of %q lies in the range [%q, %q) of %s", k, b, r.from, r.to, r.name)
				}
			}
		}
		for _, kind := range []ItemKind{KindThread, KindMessage} {
			if bytes.Equal(deletionKey(kind, ts, a), deletionKey(kind, ts, b)) || bytes.Equal(purgeKey(kind, a), purgeKey(kind, b)) {
				t.Fatalf("%s index or purge keys of %q and %q collide", kind, a, b)
			}
			gotTS, gotID, ok := parseDeletionKey(kind, deletionKey(kind, ts, a))
			if !ok || gotID != a || gotTS != max(ts, 0) {
				t.Fatalf("parseDeletionKey(%s, deletionKey(%d, %q)) = %d, %q, %t", kind, ts, a, gotTS, gotID, ok)
			}
		}

		// Round trips.
		if tid, rest, ok := parseThreadKey(threadMetaKey(a)); !ok || tid != a || string(rest) != metaSuffix {
			t.Fatalf("parseThreadKey(threadMetaKey(%q)) = %q, %q, %t", a, tid, rest, ok)
		}
		if tid, rest, ok := parseThreadKey(logKey(a, ts, mid)); !ok || tid != a {
			t.Fatalf("parseThreadKey(logKey(%q)) = %q, %q, %t", a, tid, rest, ok)
		}
		if gotMid, gotVersion, ok := parseVersionKey(versionKey(a, version)); !ok || gotMid != a || gotVersion != max(version, 0) {
			t.Fatalf("parseVersionKey(versionKey(%q, %d)) = %q, %d, %t", a, version, gotMid, gotVersion, ok)
		}
		created, gotMid, ok := parseLogSuffix(logKey(a, ts, mid)[len(logPrefix(a)):])
		if !ok || gotMid != mid || created != max(ts, 0) {
			t.Fatalf("parseLogSuffix(logKey(%q, %d, %q)) = %d, %q, %t", a, ts, mid, created, gotMid, ok)
		}
	})
}

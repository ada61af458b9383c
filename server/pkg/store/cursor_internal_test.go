package store

import (
	"context"
	"errors"
	"testing"
)

// A cursor is only good for the listing that handed it out: another kind,
// another scope, a cut or changed cursor, or plain text is ErrInvalidCursor.
func TestCursorIsBoundToItsListing(t *testing.T) {
	good := []struct {
		name string
		c    string
		ok   func(string) error
	}{
		{"threads", ThreadCursor("t1"), func(c string) error { _, err := ThreadCursorID(c); return err }},
		{"messages", messageCursor("t1", []byte("00000000000000000042:m1")), func(c string) error {
			_, err := messageCursorSuffix("t1", c)
			return err
		}},
		{"versions", versionCursor("t1", "m1", 3), func(c string) error {
			_, err := versionCursorNumber("t1", "m1", c)
			return err
		}},
	}
	for _, g := range good {
		if err := g.ok(g.c); err != nil {
			t.Fatalf("%s: the cursor it hands out (%s) is refused: %v", g.name, g.c, err)
		}
		for _, other := range good {
			if other.name != g.name {
				if err := other.ok(g.c); !errors.Is(err, ErrInvalidCursor) {
					t.Errorf("a %s cursor taken by the %s listing: %v, want ErrInvalidCursor", g.name, other.name, err)
				}
			}
		}
		for _, bad := range []string{g.c[:len(g.c)-1], g.c + "A", "x" + g.c[1:], "zzz", "t1", "3", "", "!!!!"} {
			if bad == g.c {
				continue
			}
			if err := g.ok(bad); !errors.Is(err, ErrInvalidCursor) {
				t.Errorf("%s: %q: %v, want ErrInvalidCursor", g.name, bad, err)
			}
		}
	}
	if _, err := messageCursorSuffix("t2", messageCursor("t1", []byte("00000000000000000042:m1"))); !errors.Is(err, ErrInvalidCursor) {
		t.Errorf("a message cursor of thread t1 taken by thread t2: %v", err)
	}
	if _, err := versionCursorNumber("t1", "m2", versionCursor("t1", "m1", 3)); !errors.Is(err, ErrInvalidCursor) {
		t.Errorf("a version cursor of m1 taken by m2: %v", err)
	}
	// Well formed and summed, but holding what no listing hands out.
	for name, c := range map[string]string{
		"thread id":  encodeCursor(cursorThreads, "", []byte("bad:id")),
		"log suffix": encodeCursor(cursorMessages, "t1", []byte("m1")),
		"version":    encodeCursor(cursorVersions, "t1/m1", []byte("0")),
	} {
		var err error
		switch name {
		case "thread id":
			_, err = ThreadCursorID(c)
		case "log suffix":
			_, err = messageCursorSuffix("t1", c)
		default:
			_, err = versionCursorNumber("t1", "m1", c)
		}
		if !errors.Is(err, ErrInvalidCursor) {
			t.Errorf("%s: %v, want ErrInvalidCursor", name, err)
		}
	}
}

// A cursor at the last version, as an old page would have handed out,
// gives an empty last page rather than an error.
func TestVersionCursorPastTheEnd(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateThread(ctx, Thread{ID: "t1", Title: "x", Author: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendMessage(ctx, "t1", Message{ID: "m1", Author: "a", Body: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	n := 0
	next, err := s.ScanVersions(ctx, "t1", "m1", ListOptions{Cursor: versionCursor("t1", "m1", 1)}, func(Message) error {
		n++
		return nil
	})
	if err != nil || n != 0 || next != "" {
		t.Fatalf("page after the last version: %d versions, next %q, %v", n, next, err)
	}
}

package suggest

import "testing"

func TestClosest(t *testing.T) {
	flags := []string{"threads", "messages", "versions", "deleted", "deleted-age", "dry-run", "json"}
	for _, c := range []struct{ word, want string }{
		{"thread", "threads"},  // cut short
		{"threds", "threads"},  // one edit
		{"dry-rn", "dry-run"},  // one edit
		{"deleted", "deleted"}, // itself, not a longer one
		{"jsno", "json"},       // a swap is two edits
		{"frobnicate", ""},     // nothing close
		{"", ""},               // nothing typed
		{"deleted-a", "deleted-age"},
	} {
		if got := Closest(c.word, flags, 2); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"kitten", "sitting", 3}, {"json", "jsno", 2}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

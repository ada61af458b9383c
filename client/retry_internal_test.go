package client

import (
	"net/http"
	"testing"
	"time"
)

// Retry-After in seconds or as an HTTP date; anything else is no
// Retry-After, and a huge one is capped rather than overflowing.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Duration
		said  bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{" 7 ", 7 * time.Second, true},
		{"99999999999999999", 86400 * time.Second, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{"Thu, 26 Nov 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Thu, 26 Nov 2026 11:00:00 GMT", 0, true},
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set("Retry-After", tc.value)
		}
		got, said := retryAfter(h, now)
		if got != tc.want || said != tc.said {
			t.Errorf("Retry-After %q: %v, %v; want %v, %v", tc.value, got, said, tc.want, tc.said)
		}
	}
}

// The backoff doubles from Base, never passes Max, and its jitter takes
// at most a half.
func TestBackoff(t *testing.T) {
	r := Retry{Attempts: 10, Base: 100 * time.Millisecond, Max: time.Second}
	for n := 1; n <= 10; n++ {
		full := min(r.Base<<(n-1), r.Max)
		for range 50 {
			if d := backoff(r, n); d > full || d < full/2 {
				t.Fatalf("try %d: %v, want %v to %v", n, d, full/2, full)
			}
		}
	}
}

package config

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"0s", 0},
		{"0d", 0},
		{"30d", 30 * day},
		{"1d12h", 36 * time.Hour},
		{"12h1d", 36 * time.Hour},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"1d1ns", day + 1},
		{"2d3h4m5s6ms7us8ns", 2*day + 3*time.Hour + 4*time.Minute + 5*time.Second + 6*time.Millisecond + 7*time.Microsecond + 8},
		{"1µs", time.Microsecond},
		{"106751d", 106751 * day},
		{"9223372036854775807ns", math.MaxInt64},
		{"106751d23h47m16.854775807s", math.MaxInt64},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDurationRejects(t *testing.T) {
	for _, in := range []string{
		"", " ", "d", "h", "30", "-1h", "-30d", "+1h", "1.5d", ".d", "1d-1h",
		"30 d", " 30d", "30d ", "30D", "1w", "1y", "abc", "1h abc", "1e3s",
		"106752d", "106751d24h", "9223372036854775808ns", "99999999999999999999d",
		"106751d23h47m16.854775808s",
	} {
		d, err := ParseDuration(in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
			continue
		}
		if !errors.Is(err, ErrInvalidDuration) {
			t.Errorf("ParseDuration(%q) error %v does not wrap ErrInvalidDuration", in, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{30 * day, "30d"},
		{36 * time.Hour, "1d12h"},
		{day + 90*time.Minute, "1d1h30m"},
		{day + 500*time.Millisecond, "1d500ms"},
		{90 * time.Minute, "1h30m"},
		{time.Hour, "1h"},
		{5 * time.Minute, "5m"},
		{10 * time.Minute, "10m"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Hour + time.Second, "1h0m1s"},
		{23 * time.Hour, "23h"},
	}
	for _, tt := range tests {
		got := FormatDuration(tt.in)
		if got != tt.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
		back, err := ParseDuration(got)
		if err != nil || back != tt.in {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", tt.in, back, err)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30d", "1d12h", "90m", "0", "1.5h", "-1h", "106751d23h47m16.854775807s", "1µs", "d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidDuration) {
				t.Fatalf("ParseDuration(%q) error %v does not wrap ErrInvalidDuration", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, negative", s, d)
		}
		formatted := FormatDuration(d)
		back, err := ParseDuration(formatted)
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v; FormatDuration gives %q which parses to %v, %v", s, d, formatted, back, err)
		}
	})
}

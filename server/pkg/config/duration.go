package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

const day = 24 * time.Hour

// ErrInvalidDuration is wrapped by every ParseDuration error.
var ErrInvalidDuration = errors.New("invalid duration")

// ParseDuration accepts Go durations plus days: "30d", "1d12h", "90m".
// Units may be combined in any order as in Go ("1h30m", "2d6h"); days must be
// whole numbers. Signs are refused: a retention period is never negative.
// Errors wrap ErrInvalidDuration.
func ParseDuration(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%w %q: %w", ErrInvalidDuration, s, err)
	}
	return d, nil
}

// parseDuration is ParseDuration with the bare reason as its error, for
// messages that already name the value.
func parseDuration(s string) (time.Duration, error) {
	switch s {
	case "":
		return 0, errors.New("empty")
	case "0":
		return 0, nil
	}
	var total time.Duration
	for rest := s; rest != ""; {
		num, unit, tail, err := nextSegment(rest)
		if err != nil {
			return 0, err
		}
		seg, err := segmentDuration(num, unit)
		if err != nil {
			return 0, err
		}
		if total > math.MaxInt64-seg {
			return 0, errOutOfRange
		}
		total += seg
		rest = tail
	}
	return total, nil
}

// nextSegment splits "12h30m" into "12", "h" and the rest "30m".
func nextSegment(s string) (num, unit, rest string, err error) {
	i := 0
	for i < len(s) && isNumberByte(s[i]) {
		i++
	}
	if i == 0 {
		return "", "", "", fmt.Errorf("expected a number at %q", s)
	}
	j := i
	for j < len(s) && !isNumberByte(s[j]) {
		j++
	}
	if j == i {
		return "", "", "", fmt.Errorf("missing unit after %q", s[:i])
	}
	return s[:i], s[i:j], s[j:], nil
}

func isNumberByte(c byte) bool { return c == '.' || ('0' <= c && c <= '9') }

// segmentDuration converts one number/unit pair; everything but days is
// left to time.ParseDuration so the Go syntax is exactly Go's.
func segmentDuration(num, unit string) (time.Duration, error) {
	switch unit {
	case "d":
		return days(num)
	case "ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h":
		d, err := time.ParseDuration(num + unit)
		if err == nil {
			return d, nil
		}
		if _, ferr := strconv.ParseFloat(num, 64); ferr == nil {
			return 0, errOutOfRange
		}
		return 0, fmt.Errorf("malformed number %q", num)
	default:
		return 0, fmt.Errorf("unknown unit %q (use ns, us, ms, s, m, h or d)", unit)
	}
}

var errOutOfRange = errors.New("out of range")

func days(num string) (time.Duration, error) {
	if strings.Contains(num, ".") {
		return 0, errors.New("days must be a whole number")
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > uint64(math.MaxInt64/int64(day)) {
		return 0, errOutOfRange
	}
	return time.Duration(n) * day, nil
}

// FormatDuration renders a duration the way operators write it: whole days
// as "30d", days and a remainder as "1d12h", anything else in Go's form
// without trailing zero units ("90m" renders as "1h30m"). ParseDuration reads
// every result back to the same value.
func FormatDuration(d time.Duration) string {
	if d < day {
		return compact(d)
	}
	n, rem := d/day, d%day
	if rem == 0 {
		return strconv.FormatInt(int64(n), 10) + "d"
	}
	return strconv.FormatInt(int64(n), 10) + "d" + compact(rem)
}

// compact is time.Duration.String without zero minutes and seconds after a
// larger unit: "12h0m0s" becomes "12h", "1m0s" becomes "1m".
func compact(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

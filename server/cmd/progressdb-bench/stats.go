package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// median returns the median of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

func minMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	return slices.Min(xs), slices.Max(xs)
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// fmtDur renders a duration with three significant digits in a unit that
// suits it.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3g s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	}
}

// count renders a count with k/M suffixes.
func count(n int64) string {
	f := float64(n)
	switch {
	case math.Abs(f) >= 1e6:
		return fmt.Sprintf("%.3gM", f/1e6)
	case math.Abs(f) >= 1e4:
		return fmt.Sprintf("%.3gk", f/1e3)
	default:
		return fmt.Sprintf("%d", n)
	}
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func fmtRate(r float64) string { return count(int64(math.Round(r))) + "/s" }

// fmtBytes renders a size in MiB (KiB when small).
func fmtBytes(n float64) string {
	switch {
	case math.Abs(n) >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case math.Abs(n) >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", n)
	}
}

func fmtRatio(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

func fmtPct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// spread renders "median (min–max, n)" of repetitions.
func spread(xs []float64, f func(float64) string) string {
	lo, hi := minMax(xs)
	if len(xs) == 1 {
		return f(xs[0]) + " (n=1)"
	}
	return fmt.Sprintf("%s (%s–%s, n=%d)", f(median(xs)), f(lo), f(hi), len(xs))
}

func durs(ds []time.Duration) []float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return xs
}

func fmtDurF(f float64) string { return fmtDur(time.Duration(f)) }

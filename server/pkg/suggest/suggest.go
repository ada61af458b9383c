// Package suggest finds the word a mistyped one most likely meant: a
// command, a flag, a variable name.
package suggest

import (
	"slices"
	"strings"
)

// Closest returns the candidate word most likely meant: the word itself
// when it is one, the shortest one it begins (a flag cut short), else the nearest within maxEdits edits,
// else "".
func Closest(word string, candidates []string, maxEdits int) string {
	if word == "" {
		return ""
	}
	if slices.Contains(candidates, word) {
		return word
	}
	best := ""
	for _, c := range candidates {
		if strings.HasPrefix(c, word) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	if best != "" {
		return best
	}
	bestDist := maxEdits + 1
	for _, c := range candidates {
		if d := Distance(word, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

package cli

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/progressdb/progressdb/server/pkg/config"
)

// Flag values that check what they are given while the flags are parsed:
// a bad value is then a usage error of parseFlags (exit 2, naming the
// command and the flag), whatever was wrong with it, `--threads abc` and
// `--threads -5` alike. typeName is what a command's help shows after the
// flag's name.

// countFlag is a whole number, zero or more.
type countFlag struct{ p *int }

func (f countFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f countFlag) Set(s string) error {
	n, err := parseCount(s)
	if err != nil {
		return err
	}
	*f.p = n
	return nil
}

func (countFlag) typeName() string { return "int" }

// parseCount reads a whole number, zero or more.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, errors.New("must be a whole number")
	case n < 0:
		return 0, errors.New("must not be negative")
	}
	return n, nil
}

// fractionFlag is a number from 0 to 1; with noneBelowZero, a negative
// number is allowed too (it means none).
type fractionFlag struct {
	p             *float64
	noneBelowZero bool
}

func (f fractionFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f fractionFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return errors.New("must be a number")
	case v > 1 || (v < 0 && !f.noneBelowZero):
		return errors.New("must be from 0 to 1")
	}
	*f.p = v
	return nil
}

func (fractionFlag) typeName() string { return "float" }

// durationFlag is a duration in the environment's syntax (30d, 1d12h,
// 90m), zero or more.
type durationFlag struct {
	d    time.Duration
	text string
}

func (f *durationFlag) String() string { return f.text }

func (f *durationFlag) Set(s string) error {
	d, err := config.ParseDuration(s)
	switch {
	case err != nil:
		return err
	case d < 0:
		return errors.New("must not be negative")
	}
	f.d, f.text = d, s
	return nil
}

func (*durationFlag) typeName() string { return "duration" }

package seed

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/progressdb/progressdb/server/pkg/store"
)

// threadID is "<prefix>-t000042"; the number grows past six digits as
// needed, and the fixed separators keep every ID distinct.
func threadID(prefix string, n int) string {
	return fmt.Sprintf("%s-t%06d", prefix, n)
}

// messageID is "<prefix>-m000042-0007": thread number, then message number.
// Message IDs are global in the store, so they carry the thread's number.
func messageID(prefix string, thread, msg int) string {
	return fmt.Sprintf("%s-m%06d-%04d", prefix, thread, msg)
}

// choosePrefix returns the explicit prefix if it is unused, or the first
// unused one of "s<seed>", "s<seed>.2", "s<seed>.3", …
func choosePrefix(ctx context.Context, s *store.Store, o Options) (string, error) {
	if o.Prefix != "" {
		if err := checkPrefix(o); err != nil {
			return "", err
		}
		taken, err := prefixTaken(ctx, s, o.Prefix)
		if err != nil {
			return "", err
		}
		if taken {
			return "", fmt.Errorf("%w: %q (thread %s exists)", ErrPrefixInUse, o.Prefix, threadID(o.Prefix, 1))
		}
		return o.Prefix, nil
	}
	base := "s" + strconv.FormatUint(uint64(o.Seed), 36)
	for i := 1; ; i++ {
		p := base
		if i > 1 {
			p = base + "." + strconv.Itoa(i)
		}
		taken, err := prefixTaken(ctx, s, p)
		if err != nil {
			return "", err
		}
		if !taken {
			return p, nil
		}
	}
}

// checkPrefix makes sure the longest ID the options produce is valid.
func checkPrefix(o Options) error {
	longest := messageID(o.Prefix, max(o.Threads, 1), max(o.Messages, 1))
	if err := store.ValidateID(longest); err != nil {
		return fmt.Errorf("%w: prefix %q: %w", ErrInvalidOptions, o.Prefix, err)
	}
	return nil
}

// prefixTaken reports whether an earlier seed used prefix: every seed that
// wrote anything wrote its first thread.
func prefixTaken(ctx context.Context, s *store.Store, prefix string) (bool, error) {
	_, err := s.GetThread(ctx, threadID(prefix, 1))
	switch {
	case err == nil, errors.Is(err, store.ErrMalformed):
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("seed: check prefix %q: %w", prefix, err)
}

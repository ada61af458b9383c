package keystore

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/progressdb/progressdb/server/pkg/pebbledir"
)

// Inspect checks, without the KEK, that dir holds a key store Open would
// read (a backup's copy): Pebble opens it read-only and it has this
// format's marker and a check value. It changes nothing.
func Inspect(dir string) (err error) {
	defer func() {
		// A damaged copy can make Pebble give up: a finding about the
		// copy (pebbledir.OpenReadOnly).
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %v", dir, p)
		}
	}()
	db, err := pebbledir.OpenReadOnly(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer db.Close()
	for _, key := range []string{formatKey, kekKey} {
		v, closer, err := db.Get([]byte(key))
		if errors.Is(err, pebble.ErrNotFound) {
			return fmt.Errorf("%s: not a key store (no %s)", dir, key)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		var ferr error
		if key == formatKey {
			_, ferr = parseFormat(v)
		}
		closer.Close()
		if ferr != nil {
			return fmt.Errorf("%s: %w", dir, ferr)
		}
	}
	return nil
}

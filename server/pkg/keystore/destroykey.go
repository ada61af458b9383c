package keystore

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// DestroyKey deletes one key (thread, number) with its author entries,
// synced, wherever its author is not known: the replay of a subject
// erasure on a restored copy (spec §12 Copies) knows the key number from
// the message's record and nothing of the author but the HMAC the key's
// entry holds. It reports whether the key was there; destroying a key that
// is gone is a no-op.
func (ks *KeyStore) DestroyKey(ctx context.Context, ref KeyRef) (bool, error) {
	if err := ks.live(ctx); err != nil {
		return false, err
	}
	if err := checkThread(ref.Thread); err != nil {
		return false, err
	}
	if p := ks.repl.Load(); p != nil {
		gone, err := ks.destroyKeysReplicated(ctx, p, []KeyRef{ref})
		if err != nil {
			return false, fmt.Errorf("destroy key %d of thread %s: %w", ref.Number, ref.Thread, err)
		}
		return len(gone) > 0, nil
	}
	v, ok, err := ks.get(keyEntry(ref.Thread, ref.Number))
	if err != nil || !ok {
		return false, err
	}
	if len(v) < 32 {
		return false, fmt.Errorf("key %d of thread %s: malformed entry", ref.Number, ref.Thread)
	}
	var mac [32]byte
	copy(mac[:], v)
	gone, err := ks.destroyKey(ref, mac)
	if err != nil {
		return false, fmt.Errorf("destroy key %d of thread %s: %w", ref.Number, ref.Thread, err)
	}
	if err := ks.db.LogData(nil, pebble.Sync); err != nil {
		return gone, fmt.Errorf("destroy key %d of thread %s: sync: %w", ref.Number, ref.Thread, err)
	}
	return gone, nil
}

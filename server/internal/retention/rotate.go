package retention

import (
	"context"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// RotateKEK re-wraps every key of ks under to and erases the old wrapped
// values (spec §12, `keys rotate-kek`). It runs under the lease, like a
// run or an encryption pass, so that no purge destroys keys and no pass
// creates them while the key store changes its KEK; a held lease is a
// *LeaseHeldError and nothing is re-wrapped. A rotation cut off part way
// is finished by the same call, with the same to, on a key store opened
// with RotateTo set (keystore.Options).
func (r *Runner) RotateKEK(ctx context.Context, ks *keystore.KeyStore, to *secrets.Keeper, opts keystore.RewrapOptions) (keystore.RewrapResult, error) {
	var res keystore.RewrapResult
	err := r.Exclusive(ctx, "rotate kek", func(ctx context.Context, check func() error) error {
		if err := check(); err != nil {
			return err
		}
		var err error
		res, err = ks.Rewrap(ctx, to, opts)
		return err
	})
	return res, err
}

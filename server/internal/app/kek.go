package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/keystore"
)

// kekProbeTimeout bounds the round trip that checks a KEK at start: a KMS
// that does not answer stops the start instead of hanging it.
const kekProbeTimeout = 30 * time.Second

// checkKEK opens the KEK's keeper as the key store does and wraps and
// unwraps a random value with it, so that a KMS key this host cannot use
// (no credentials, no such key, no server) is refused before anything is
// created, naming PROGRESSDB_KEK, by serve and config check alike. A
// local key never fails here: config.Load has checked it.
func checkKEK(ctx context.Context, cfg config.Config) error {
	if cfg.KEK == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, kekProbeTimeout)
	defer cancel()
	fail := func(err error) error {
		return &StartupError{Var: config.VarKEK, Value: "<redacted>",
			Rule: "must name a key this host can use: check the KMS's credentials and the key's URL", Err: err}
	}
	keeper, err := keystore.OpenKEK(ctx, cfg.KEK)
	if err != nil {
		return fail(err)
	}
	defer keeper.Close()
	probe := make([]byte, 32)
	_, _ = rand.Read(probe)
	wrapped, err := keeper.Encrypt(ctx, probe)
	if err != nil {
		return fail(err)
	}
	back, err := keeper.Decrypt(ctx, wrapped)
	if err == nil && !bytes.Equal(back, probe) {
		err = errors.New("the key unwrapped another value than it wrapped")
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

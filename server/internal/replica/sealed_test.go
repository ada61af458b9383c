package replica_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"gocloud.dev/secrets"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// sealing seals a test cluster's stores (testCluster.sealed): each
// replica's store has its own key store beside its folder, opened with
// one KEK and the group's secret, and changed only through the log, as
// serve opens a sealed replicated shard's.
type sealing struct {
	keeper *secrets.Keeper
	secret []byte
}

// testKEK and testGroupSecret are every sealed cluster's, the same in a
// helper process and the test that reads its folders.
var (
	testKEK         = "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	testGroupSecret = bytes.Repeat([]byte{9}, keystore.GroupSecretSize)
)

func newSealing(t *testing.T) *sealing {
	t.Helper()
	k, err := keystore.OpenKEK(context.Background(), testKEK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close() })
	return &sealing{keeper: k, secret: testGroupSecret}
}

// keyStore is replica (g, i)'s key store folder; "" when c is plain.
func (c *testCluster) keyStore(i int, g uint64) string {
	if c.sealed == nil {
		return ""
	}
	return filepath.Join(c.dir, fmt.Sprintf("node%d", i), "keys", fmt.Sprintf("shard%d", g))
}

// options opens the store in dir: sealed with the key store at
// ks+suffix (the staged one beside it for a snapshot's state), or plain.
func (c *testCluster) options(dir, ks, suffix string) store.Options {
	o := storeOptions
	if c.sealed == nil {
		return o
	}
	o.OpenSealer = c.sealed.opener(dir, ks+suffix)
	return o
}

// opener opens the key store at ks for the database in dir, creating
// it bound to the database when it is not sealed yet.
func (s *sealing) opener(dir, ks string) func(context.Context, store.SealState) (store.Sealer, io.Closer, error) {
	return func(ctx context.Context, st store.SealState) (store.Sealer, io.Closer, error) {
		k, err := keystore.Open(ctx, ks, keystore.Options{Keeper: s.keeper, DataPath: dir, MustExist: st.Sealed,
			Database: st.DatabaseID, GroupSecret: s.secret})
		if err != nil {
			return nil, nil, err
		}
		return k, k, nil
	}
}

// recover finishes or undoes what a crash left of replica (g, i)'s
// snapshot install, as a node does before it opens a shard.
func (c *testCluster) recover(i int, g uint64) error {
	if ks := c.keyStore(i, g); ks != "" {
		return replica.RecoverFolder(c.folder(i, g), ks)
	}
	return replica.RecoverFolder(c.folder(i, g))
}

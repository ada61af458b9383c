package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// Nodes starting together create one receipt key for the cluster (spec
// §11.1), and every shard's key store names a subject with it: the same
// HMAC on shards of different nodes, where each key store's own receipt
// key would give another. A node with another KEK is refused, naming
// PROGRESSDB_KEK.
func TestClusterShardsShareTheReceiptKey(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t)
	client := etcd.Client(t)
	keys := cluster.Keys{Name: "chat"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodeCfg := func() config.Config {
		dir := t.TempDir()
		return config.Config{DBPath: filepath.Join(dir, "data"), KeystorePath: filepath.Join(dir, "keys"), KEK: sealKEK()}
	}
	cfgs := []config.Config{nodeCfg(), nodeCfg(), nodeCfg()}
	got := make([][]byte, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			k, err := ClusterReceiptKey(ctx, cfg, client, keys)
			if err != nil {
				t.Errorf("node %d: %v", i, err)
			}
			got[i] = k
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range got {
		if len(got[i]) != 32 || !bytes.Equal(got[i], got[0]) {
			t.Fatalf("node %d's receipt key differs from node 0's (or is not 32 bytes)", i)
		}
	}
	resp, err := client.Get(ctx, keys.ReceiptKey())
	if err != nil || len(resp.Kvs) != 1 || bytes.Contains(resp.Kvs[0].Value, got[0]) {
		t.Fatalf("etcd holds the receipt key unwrapped, or not once: %v", err)
	}

	var subjects []string
	for i, cfg := range cfgs[:2] {
		shards, err := openClusterShards(context.Background(), cfg, testLogger(t), []int{i}, clusterSecrets{receipt: got[i]})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := shards.Store(i)
		ks := KeyStore(st)
		if ks == nil {
			t.Fatalf("shard %d opened plain", i)
		}
		subjects = append(subjects, ks.Subject("alice"))
		if err := shards.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if subjects[0] != subjects[1] {
		t.Errorf("one subject, two HMACs on two shards: %s, %s", subjects[0], subjects[1])
	}
	// Reopened without the cluster's key, the shard's key store would
	// name the subject with its own.
	shards, err := openClusterShards(context.Background(), cfgs[0], testLogger(t), []int{0}, clusterSecrets{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := shards.Store(0)
	if own := KeyStore(st).Subject("alice"); own == subjects[0] {
		t.Error("the shard's own receipt key gives the cluster's HMAC: the test proves nothing")
	}
	if err := shards.Close(); err != nil {
		t.Fatal(err)
	}

	other := nodeCfg()
	other.KEK = "base64key://" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{4}, 32))
	_, err = ClusterReceiptKey(ctx, other, client, keys)
	var se *StartupError
	if !errors.As(err, &se) || se.Var != config.VarKEK || !errors.Is(err, cluster.ErrReceiptKey) {
		t.Errorf("another KEK: %v; want a StartupError naming %s", err, config.VarKEK)
	}
}

// A sealed shard opened without its key store is refused naming
// PROGRESSDB_KEYSTORE_PATH and the shard's folders; without the KEK,
// naming PROGRESSDB_KEK.
func TestClusterSealedShardNeedsItsKeyStore(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Config{DBPath: filepath.Join(dir, "data"), KeystorePath: filepath.Join(dir, "keys"), KEK: sealKEK()}
	shards, err := openClusterShards(context.Background(), cfg, testLogger(t), []int{3}, clusterSecrets{})
	if err != nil {
		t.Fatal(err)
	}
	if err := shards.Close(); err != nil {
		t.Fatal(err)
	}
	noKEK := cfg
	noKEK.KEK, noKEK.KeystorePath = "", ""
	other := cfg
	other.KeystorePath = filepath.Join(dir, "elsewhere")
	for _, c := range []struct {
		name    string
		cfg     config.Config
		wantVar string
	}{{"no KEK", noKEK, config.VarKEK}, {"no key store", other, config.VarKeystorePath}} {
		_, err := openClusterShards(context.Background(), c.cfg, testLogger(t), []int{3}, clusterSecrets{})
		var se *StartupError
		if !errors.As(err, &se) || se.Var != c.wantVar {
			t.Errorf("%s: %v; want a StartupError naming %s", c.name, err, c.wantVar)
			continue
		}
		if c.wantVar == config.VarKeystorePath && se.Value != cluster.ShardKeystorePath(other.KeystorePath, 3) {
			t.Errorf("%s: names %s, not shard 3's key store", c.name, se.Value)
		}
	}
}

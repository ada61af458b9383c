package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A sealed cluster has one receipt key (spec §11.1), so that a subject has
// one HMAC on every shard and an erasure recorded in etcd seals its author
// under a key every owner holds. etcd holds it only wrapped by the KEK;
// each node unwraps it at start and hands it to its shards' key stores.

// receiptKeySize is the receipt key's length: an HMAC-SHA256 and an
// AES-256-GCM key.
const receiptKeySize = 32

// ErrReceiptKey: the receipt key in etcd does not unwrap with this KEK, or
// is not a receipt key.
var ErrReceiptKey = errors.New("the cluster's receipt key does not open with this KEK")

// ReceiptKey holds the cluster's receipt key, wrapped by the KEK.
func (k Keys) ReceiptKey() string { return "/" + k.Name + "/sealing/receipt-key" }

// ReplicaSecret holds the secret of a sealed cluster's replicated shards,
// wrapped by the KEK: what every replica of a shard's key store derives
// from it must be the same on each (keystore.Options.GroupSecret).
func (k Keys) ReplicaSecret() string { return "/" + k.Name + "/sealing/replica-secret" }

// Wrapper is the KEK as the receipt key needs it (a *secrets.Keeper).
type Wrapper interface {
	Encrypt(ctx context.Context, plain []byte) ([]byte, error)
	Decrypt(ctx context.Context, wrapped []byte) ([]byte, error)
}

// EnsureReceiptKey returns the cluster's receipt key, creating it when
// etcd holds none: at cluster create, or at the first start with a KEK
// of a cluster that existed before. One transaction creates it only if
// absent, so nodes starting together agree on one; the loser reads the
// winner's. A key that does not unwrap is an error wrapping
// ErrReceiptKey, never replaced.
func EnsureReceiptKey(ctx context.Context, c *clientv3.Client, k Keys, kek Wrapper) ([]byte, error) {
	return ensureSecret(ctx, c, k.ReceiptKey(), kek)
}

// EnsureReplicaSecret returns the replicated shards' secret
// (Keys.ReplicaSecret), created as EnsureReceiptKey creates the receipt
// key, at the first start with a KEK of a replicated cluster; an error
// wrapping ErrReceiptKey when this KEK does not open it.
func EnsureReplicaSecret(ctx context.Context, c *clientv3.Client, k Keys, kek Wrapper) ([]byte, error) {
	return ensureSecret(ctx, c, k.ReplicaSecret(), kek)
}

// ensureSecret returns the secret at key, unwrapped by kek, creating it
// when etcd holds none.
func ensureSecret(ctx context.Context, c *clientv3.Client, key string, kek Wrapper) ([]byte, error) {
	resp, err := c.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		fresh := make([]byte, receiptKeySize)
		if _, err := rand.Read(fresh); err != nil {
			return nil, err
		}
		wrapped, err := kek.Encrypt(ctx, fresh)
		if err != nil {
			return nil, fmt.Errorf("wrap %s: %w", key, err)
		}
		txn, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(wrapped))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", key, err)
		}
		if txn.Succeeded {
			return fresh, nil
		}
		clear(fresh)
		resp = (*clientv3.GetResponse)(txn.Responses[0].GetResponseRange())
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("create %s: it vanished", key)
		}
	}
	plain, err := kek.Decrypt(ctx, resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("%w (%s): %w", ErrReceiptKey, key, err)
	}
	if len(plain) != receiptKeySize {
		return nil, fmt.Errorf("%w (%s): %d bytes, not %d", ErrReceiptKey, key, len(plain), receiptKeySize)
	}
	return plain, nil
}

// RewrapReceiptKey re-wraps the cluster's receipt key from the KEK from
// to the KEK to (keys rotate-kek): one compare-and-swap, so a rotation
// killed part way, or run again on another node, finds it done (it opens
// with to) and changes nothing. rewrapped says whether this call wrote
// it; a cluster without one has nothing to re-wrap. A key that opens
// with neither is an error wrapping ErrReceiptKey.
func RewrapReceiptKey(ctx context.Context, c *clientv3.Client, k Keys, from, to Wrapper) (rewrapped bool, err error) {
	key := k.ReceiptKey()
	resp, err := c.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("read the receipt key: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	kv := resp.Kvs[0]
	if plain, err := to.Decrypt(ctx, kv.Value); err == nil {
		clear(plain)
		return false, nil
	}
	plain, err := from.Decrypt(ctx, kv.Value)
	if err != nil {
		return false, fmt.Errorf("%w (%s): it opens with neither the current KEK nor the new one: %w", ErrReceiptKey, key, err)
	}
	defer clear(plain)
	wrapped, err := to.Encrypt(ctx, plain)
	if err != nil {
		return false, fmt.Errorf("wrap the receipt key with the new KEK: %w", err)
	}
	txn, err := c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpPut(key, string(wrapped))).Commit()
	if err != nil {
		return false, fmt.Errorf("write the re-wrapped receipt key: %w", err)
	}
	if !txn.Succeeded {
		// Another rotation wrote it meanwhile: its outcome decides.
		return RewrapReceiptKey(ctx, c, k, from, to)
	}
	return true, nil
}

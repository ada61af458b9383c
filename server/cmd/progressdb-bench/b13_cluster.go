package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/secrets/localsecrets"

	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B13E's cluster line (spec §11.1): the same erasure, the same threads,
// on one sealed node and on three sealed nodes holding a shard each, all
// `serve`'s own wiring in this process over an embedded etcd (as B11), on
// the same cores: a ratio of the same CPU budget, not a scaling claim.
// Timed from POST /admin/erasures to GET /admin/erasures/{id} completed,
// through HTTP.

// b13KEK is the KEK of B13E's databases, as a URL for serve.
func b13KEK() ([32]byte, string) {
	var kek [32]byte
	for i := range kek {
		kek[i] = byte(i + 13)
	}
	return kek, "base64key://" + base64.StdEncoding.EncodeToString(kek[:])
}

// b13SealedStore seeds c's threads that keep selects into a new sealed
// database at db with its key store at ks, as serve opens them.
func b13SealedStore(ctx context.Context, b *bench, db, ks string, c *b13Case, keep func(tid string) bool) error {
	kek, _ := b13KEK()
	keeper := localsecrets.NewKeeper(kek)
	defer keeper.Close()
	keys, err := keystore.Open(ctx, ks, keystore.Options{Keeper: keeper, DataPath: db})
	if err != nil {
		return err
	}
	st, err := store.Open(db, store.Options{Sealer: keys, Closer: keys})
	if err != nil {
		_ = keys.Close()
		return err
	}
	if err := b13Seed(ctx, b, st, c, keep); err != nil {
		_ = st.Close()
		return err
	}
	return st.Close()
}

// b13ClusterLine times c's erasure on one node and on three.
func b13ClusterLine(ctx context.Context, b *bench, sec *section, c *b13Case) error {
	ec, endpoint, closeEtcd, err := b11Etcd(b.dir("b13e", "etcd"))
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	defer closeEtcd()
	_, kekURL := b13KEK()
	env := []string{"PROGRESSDB_KEK=" + kekURL, "PROGRESSDB_RETENTION_ENABLED=true", "PROGRESSDB_RETENTION_CRON=0 2 1 1 *",
		"PROGRESSDB_RETENTION_RUN_MISSED=false"}
	reps := b.reps(3)
	sec.setup = append(sec.setup, fmt.Sprintf("Cluster line: the %d-thread database with the author in %d threads, "+
		"sealed, on one node and, split by shard (%d shards), on three nodes holding a shard each (each shard with "+
		"its own key store), all `serve`'s own wiring in this process over an etcd embedded in it, sharing this "+
		"machine's cores (a ratio of one CPU budget, not a scaling claim). Timed through HTTP: from POST "+
		"/admin/erasures (to the node owning shard 0 on the cluster) to GET /admin/erasures/{id} answering "+
		"`completed`, polled every 5 ms. %d repetition(s), each on fresh databases, the two layouts interleaved.",
		c.threads, c.author, b11Shards, reps))
	var one, three []float64
	cl := &http.Client{Timeout: time.Minute}
	for rep := range reps {
		dir := b.dir("b13e", fmt.Sprintf("single-%d", rep))
		if err := b13SealedStore(ctx, b, filepath.Join(dir, "data"), filepath.Join(dir, "keys"), c, nil); err != nil {
			return err
		}
		nd, err := b11Serve(ctx, "", dir, cl, append(env, "PROGRESSDB_ADMIN_TOKEN="+b11Admin))
		if err != nil {
			return err
		}
		d, err := b13EraseThrough(ctx, cl, nd.url, c)
		if serr := nd.shutdown(); err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("B13E one node: %w", err)
		}
		one = append(one, float64(d))

		seed := func(nodeDir string, shard int) error {
			return b13SealedStore(ctx, b, cluster.ShardDBPath(filepath.Join(nodeDir, "data"), shard),
				cluster.ShardKeystorePath(filepath.Join(nodeDir, "keys"), shard), c,
				func(tid string) bool { return cluster.ShardOf(tid, b11Shards) == shard })
		}
		cc, err := b11StartCluster(ctx, b, ec, endpoint, fmt.Sprintf("erasure-%d", rep), 3, nil, seed, env...)
		if err != nil {
			return err
		}
		d, err = b13EraseThrough(ctx, cl, cc.owners[0], c)
		if cerr := cc.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("B13E three nodes: %w", err)
		}
		three = append(three, float64(d))
		b.logf("B13E cluster rep %d/%d: one node %s, three nodes %s", rep+1, reps, fmtDurF(one[len(one)-1]), fmtDur(d))
	}
	t := table{caption: "The same erasure on one sealed node and on three (a shard each), through HTTP.",
		header: []string{"layout", "Messages erased", "Keys destroyed", "Request → completed", "vs one node"}}
	t.add("one node, one database", fmt.Sprint(c.purged), fmt.Sprint(c.keys), spread(one, fmtDurF), "1.00×")
	t.add("3 nodes, a shard each", fmt.Sprint(c.purged), fmt.Sprint(c.keys), spread(three, fmtDurF), fmtRatio(median(three)/median(one)))
	sec.tables = append(sec.tables, t)
	sec.addTarget("erasure on 3 nodes vs 1 node, same data, same cores (time ratio; recorded, no target)", "—",
		fmtRatio(median(three)/median(one)), true)
	return nil
}

// b13EraseThrough asks node u for the erasure of B13E's author and waits
// until its status is completed, checking its counts against c's.
func b13EraseThrough(ctx context.Context, cl *http.Client, u string, c *b13Case) (time.Duration, error) {
	start := time.Now()
	var acc retention.ErasureAccepted
	if err := adminCall(cl, http.MethodPost, u+"/admin/erasures", `{"author":"`+b13Subject+`"}`, http.StatusAccepted, &acc); err != nil {
		return 0, err
	}
	for {
		var es retention.ErasureStatus
		if err := adminCall(cl, http.MethodGet, u+"/admin/erasures/"+acc.ErasureID, "", http.StatusOK, &es); err != nil {
			return 0, err
		}
		switch es.Status {
		case retention.ErasureCompleted:
			d := time.Since(start)
			if want := int64(c.author * b13Authored); es.MessagesPurged != want || es.KeysDestroyed != int64(c.author) {
				return d, fmt.Errorf("erased %d messages and %d keys, want %d and %d", es.MessagesPurged, es.KeysDestroyed, want, c.author)
			}
			c.purged, c.keys = es.MessagesPurged, es.KeysDestroyed
			return d, nil
		case retention.ErasureFailed:
			return 0, fmt.Errorf("erasure failed: %s", es.Error)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// adminCall sends one request with the admin token and decodes its
// answer, an error unless it has status want.
func adminCall(cl *http.Client, method, u, body string, want int, out any) error {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+b11Admin)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, bytes.TrimSpace(data))
	}
	return json.Unmarshal(data, out)
}

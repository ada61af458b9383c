package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"gocloud.dev/secrets/localsecrets"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B13E: subject erasure (spec §12). The time from POST /admin/erasures'
// call (Manager.Request) to the erasure's status completed (keys
// destroyed, versions purged, both erase steps, footer) for an author in
// few threads of a database, in as few threads of a database 4× larger,
// and in many threads of the larger one: the cost follows the author's
// threads, not the database.

const (
	b13Messages = 8 // per thread, by its creator
	b13Authored = 2 // per thread the erased author writes in
	b13Subject  = "b13-subject"
)

// b13Case is one database and author.
type b13Case struct {
	label           string
	threads, author int       // threads of the database, and of the author
	took, erase     []float64 // request → completed; the data's erase step (footer)
	purged, keys    int64
}

func runB13E(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	n := b.scaled(250, 20)
	few := min(10, n)
	many := min(b.scaled(1000, 40), 4*n)
	cases := []*b13Case{
		{label: "N, author in few threads", threads: n, author: few},
		{label: "4N, author in few threads", threads: 4 * n, author: few},
		{label: "4N, author in many threads", threads: 4 * n, author: many},
	}
	reps := b.reps(3)
	sec.setup = append(sec.setup, fmt.Sprintf("Sealed databases (a local KEK, the key store beside the data) of "+
		"%d (N) and %d (4N) threads, each of %d messages by its own creator, flushed and compacted (the key store's "+
		"keys flushed too); the erased "+
		"author wrote %d messages in each of %d or %d of the threads, spread over the keyspace. Measured: from "+
		"the request (`Manager.Request`, what POST /admin/erasures calls) to the erasure's status `completed`: "+
		"claims, keys destroyed, versions purged in batches (production defaults), the key store's and the "+
		"data's erase steps, the footer. %d repetition(s), each on a freshly seeded database.",
		n, 4*n, b13Messages, b13Authored, few, many, reps))
	for _, c := range cases {
		for i := range reps {
			if err := b13Rep(ctx, b, c, i); err != nil {
				return sec, err
			}
			b.logf("B13E %s: rep %d/%d: %s (%d messages, %d keys)", c.label, i+1, reps, fmtDurF(last(c.took)), c.purged, c.keys)
		}
	}
	tb := table{header: []string{"Database", "Author's threads", "Messages erased", "Keys destroyed", "Request → completed",
		"of which the data's erase step"}}
	for _, c := range cases {
		tb.add(fmt.Sprintf("%d threads", c.threads), fmt.Sprint(c.author), fmt.Sprint(c.purged), fmt.Sprint(c.keys),
			spread(c.took, fmtDurF), spread(c.erase, fmtDurF))
	}
	sec.tables = append(sec.tables, tb)
	small, large, wide := cases[0], cases[1], cases[2]
	bigger := median(large.took) / median(small.took)
	sec.addTarget("erasure time, author in the same threads, N → 4N database", "≈ 1x (≤ 1.5x)",
		fmt.Sprintf("%s (%s → %s)", fmtRatio(bigger), fmtDurF(median(small.took)), fmtDurF(median(large.took))), bigger <= 1.5)
	if bigger > 1.5 {
		sec.notes = append(sec.notes, fmt.Sprintf("The erasure of the same author takes %s as long in the larger "+
			"database: its fixed part is the data's erase step (%s → %s), which compacts the key ranges of the "+
			"purged versions (spec §12 erases message-level purges' spans, a subject erasure's included) and "+
			"rewrites every table holding one of them: spread over the keyspace, as here, their number grows with "+
			"the database, as in B6. Claims, key destruction and purges follow the author's messages.",
			fmtRatio(bigger), fmtDurF(median(small.erase)), fmtDurF(median(large.erase))))
	}
	onCluster := &b13Case{label: "cluster", threads: n, author: min(b.scaled(100, 10), n)}
	if err := b13ClusterLine(ctx, b, sec, onCluster); err != nil {
		return sec, err
	}
	sec.notes = append(sec.notes, fmt.Sprintf("An author in %d threads instead of %d (%s the threads) takes %s "+
		"as long (%s → %s): the cost follows the author's threads and messages.", wide.author, large.author,
		fmtRatio(float64(wide.author)/float64(large.author)), fmtRatio(median(wide.took)/median(large.took)),
		fmtDurF(median(large.took)), fmtDurF(median(wide.took))))
	return sec, nil
}

// b13Rep seeds a fresh sealed database for c and times one erasure.
func b13Rep(ctx context.Context, b *bench, c *b13Case, rep int) error {
	root := b.dir(fmt.Sprintf("b13e-%d-%d-%d", c.threads, c.author, rep))
	var kek [32]byte
	for i := range kek {
		kek[i] = byte(i + 13)
	}
	keeper := localsecrets.NewKeeper(kek)
	defer keeper.Close()
	ks, err := keystore.Open(ctx, filepath.Join(root, "keys"), keystore.Options{Keeper: keeper, DataPath: filepath.Join(root, "db")})
	if err != nil {
		return err
	}
	defer ks.Close()
	st, err := store.Open(filepath.Join(root, "db"), store.Options{Sealer: ks})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := b13Seed(ctx, b, st, c, nil); err != nil {
		return err
	}
	if err := st.DB().Flush(); err != nil {
		return err
	}
	if err := st.DB().Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return err
	}
	// The key store settled too: its seeded keys in tables, as old keys
	// are, rather than all in its memtable, which the erasure's first
	// erase step would flush. (A key made and destroyed, then erased.)
	if _, _, err := ks.Key(ctx, "b13-settle", "settle"); err != nil {
		return err
	}
	if _, err := ks.DestroyThread(ctx, "b13-settle"); err != nil {
		return err
	}
	if _, err := ks.Erase(ctx, erase.Options{}); err != nil {
		return err
	}
	cfg, err := config.Load([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(root, "db"), "PROGRESSDB_RETENTION_ENABLED=true",
		"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(root, "audit")})
	if err != nil {
		return err
	}
	r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Keys: ks,
		Logger: slog.New(slog.DiscardHandler), Metrics: retention.NewMetrics(nil), Version: "bench"})
	if err != nil {
		return err
	}
	m, err := retention.NewService(retention.ServiceOptions{Runner: r})
	if err != nil {
		return err
	}
	defer m.Close()

	start := time.Now()
	acc, err := m.Request(ctx, b13Subject)
	if err != nil {
		return err
	}
	for {
		es, err := m.Erasure(ctx, acc.ErasureID)
		if err != nil {
			return err
		}
		switch es.Status {
		case retention.ErasureCompleted:
			c.took = append(c.took, float64(time.Since(start)))
			sum, err := audit.LastRun(cfg.Retention.AuditPath)
			if err != nil || sum == nil || sum.Footer == nil {
				return fmt.Errorf("B13E: the erasure's audit file: %v", err)
			}
			c.erase = append(c.erase, float64(time.Duration(sum.Footer.EraseMS)*time.Millisecond))
			c.purged, c.keys = es.MessagesPurged, es.KeysDestroyed
			if want := int64(c.author * b13Authored); es.MessagesPurged != want || es.KeysDestroyed != int64(c.author) {
				return fmt.Errorf("B13E: erased %d messages and %d keys, want %d and %d", es.MessagesPurged, es.KeysDestroyed, want, c.author)
			}
			return nil
		case retention.ErasureFailed:
			return fmt.Errorf("B13E: erasure failed: %s", es.Error)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// b13Seed writes c's threads that keep selects (nil: all); the author
// writes in every threads/author-th.
func b13Seed(ctx context.Context, b *bench, st *store.Store, c *b13Case, keep func(tid string) bool) error {
	every := max(1, c.threads/c.author)
	authored := 0
	body := json.RawMessage(`{"text":"a message of about sixty bytes, like a short chat line"}`)
	p := newProgress(b, fmt.Sprintf("B13E: seeding %d threads", c.threads), int64(c.threads))
	for i := range c.threads {
		tid := fmt.Sprintf("b13-%06d", i)
		owner := fmt.Sprintf("owner-%06d", i)
		authors := i%every == 0 && authored < c.author
		if authors {
			authored++
		}
		if keep != nil && !keep(tid) {
			continue
		}
		if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: "a title", Author: owner}); err != nil {
			return err
		}
		for range b13Messages {
			if _, err := st.AppendMessage(ctx, tid, store.Message{Author: owner, Body: body}); err != nil {
				return err
			}
		}
		if authors {
			for range b13Authored {
				if _, err := st.AppendMessage(ctx, tid, store.Message{Author: b13Subject, Body: body}); err != nil {
					return err
				}
			}
		}
		p.update(int64(i + 1))
	}
	p.done(int64(c.threads))
	return nil
}

package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// BenchmarkPurgePauseSwitch: one retention run purging 3,000 deleted
// threads (3 messages each), with the pause switch in the database (a
// single node), in etcd read at every batch boundary (MaxAge < 0), and in
// etcd as a cluster node reads it (a read trusted for
// DefaultPauseMaxAge between batches). docs/cluster.md quotes it:
//
//	go test -run '^$' -bench PurgePauseSwitch -benchtime 3x ./server/internal/cluster
func BenchmarkPurgePauseSwitch(b *testing.B) {
	srv := etcdtest.Start(b)
	k := Keys{Name: "chat"}
	for _, bc := range []struct {
		name  string
		pause func() retention.PauseSwitch
	}{
		{"database", func() retention.PauseSwitch { return nil }},
		{"etcd-every-batch", func() retention.PauseSwitch { return &Pause{Client: srv.Client(b), Keys: k, MaxAge: -1} }},
		{"etcd-cluster", func() retention.PauseSwitch { return &Pause{Client: srv.Client(b), Keys: k} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				st, err := store.Open(filepath.Join(b.TempDir(), "db"), store.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for i := range 3000 {
					tid := fmt.Sprintf("t%05d", i)
					if _, err := st.CreateThread(ctx, store.Thread{ID: tid, Title: "x", Author: "y"}); err != nil {
						b.Fatal(err)
					}
					for j := range 3 {
						if _, err := st.AppendMessage(ctx, tid, store.Message{Author: "a", Body: []byte(fmt.Sprintf(`{"text":"m%d"}`, j))}); err != nil {
							b.Fatal(err)
						}
					}
					if _, err := st.DeleteThread(ctx, tid); err != nil {
						b.Fatal(err)
					}
				}
				r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Logger: slog.New(slog.DiscardHandler),
					Config: config.Retention{Enabled: true, Period: 24 * time.Hour, AuditPath: b.TempDir()},
					Now:    func() time.Time { return time.Now().Add(48 * time.Hour) }, Pause: bc.pause()})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := r.Run(ctx, retention.RunRequest{Trigger: retention.TriggerCLI})
				b.StopTimer()
				if err != nil || res.Purged != 3000 {
					b.Fatalf("run: %+v, %v", res, err)
				}
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

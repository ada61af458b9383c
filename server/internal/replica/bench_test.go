package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/replica"
	"github.com/progressdb/progressdb/server/internal/replica/replicatest"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// BenchmarkReplicatedAppend measures appends through the leader's store
// of a group of three replicas on real stores over Local, one writer (a
// write's latency: the leader's and a follower's fsync on its path) and
// eight (group commit).
func BenchmarkReplicatedAppend(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprint("w", writers), func(b *testing.B) {
			ctx := context.Background()
			net := replica.NewLocal()
			dir := b.TempDir()
			const g = 3
			var hosts []*replica.Host
			var stores []*store.Store
			for i := range 3 {
				h, err := replica.NewHost(replica.Config{Transport: net, Tick: 10 * time.Millisecond, ElectionTicks: 50,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				s, err := store.Open(filepath.Join(dir, fmt.Sprint(i)), storeOptions)
				if err != nil {
					b.Fatal(err)
				}
				id := replicatest.ID(g, i)
				if err := h.AddGroup(ctx, replica.GroupConfig{Group: g, Replica: id, Peers: replicatest.Peers(g), Store: s}); err != nil {
					b.Fatal(err)
				}
				net.Attach(id, h)
				h.Start(ctx)
				hosts = append(hosts, h)
				stores = append(stores, s)
			}
			defer func() {
				for i, h := range hosts {
					h.Stop()
					stores[i].Close()
				}
			}()
			var s *store.Store // the leader's, once it may take writes
			for s == nil {
				for i, h := range hosts {
					if h.Lease(g) != 0 {
						s = stores[i]
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
			var tids []string
			for range writers {
				th, err := s.CreateThread(ctx, store.Thread{Title: "t", Author: "a"})
				if err != nil {
					b.Fatal(err)
				}
				tids = append(tids, th.ID)
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N/writers + 1
			for w := range writers {
				wg.Go(func() {
					for range per {
						if _, err := s.AppendMessage(ctx, tids[w], store.Message{Author: "a", Body: body("x")}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

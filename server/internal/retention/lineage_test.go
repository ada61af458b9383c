package retention

import (
	"context"
	"testing"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A restored copy sharing its origin's trail (spec §10.1): its purges are
// never lacking for the origin, while the origin's purges after the
// backup's head are lacking for the copy; a copy of a backup with no
// identity takes every other run as its origin's.
func TestLineageSharedTrail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noOrigin bool
	}{{"copy", false}, {"copy of a database without identity", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			e.run(e.runner(), RunRequest{Trigger: TriggerCLI}) // the backup's head
			e.content("mine", 1)
			e.content("origins", 1)
			backupDir := e.copyDB("backup")
			cst, cr := e.restored(backupDir)
			if _, err := cst.BecomeCopy(ctx, "copy-id", "b1"); err != nil {
				t.Fatal(err)
			}
			if tc.noOrigin {
				// As a backup taken before identities would restore: no
				// origin to name.
				if err := cst.DB().Set([]byte("sys:db:lineage"), []byte(`{"origin_id":"","backup_id":"b1","ancestors":[]}`), nil); err != nil {
					t.Fatal(err)
				}
			}

			// The copy deletes and purges "mine", which the origin keeps.
			e.at(40 * day)
			if _, err := cst.DeleteThread(ctx, "mine"); err != nil {
				t.Fatal(err)
			}
			e.at(80 * day)
			res, err := cr.Run(ctx, RunRequest{Trigger: TriggerCLI})
			if err != nil || res.Purged != 1 {
				t.Fatalf("the copy's run: %v %+v", err, res)
			}
			if h := e.audit(res).Header; h.DatabaseID != "copy-id" {
				t.Fatalf("the copy's run names database %q", h.DatabaseID)
			}
			lacks, whole, err := e.runner().Behind(ctx)
			if err != nil || lacks != 0 || !whole {
				t.Fatalf("the origin after the copy's purge: lacks %d whole %v %v, want nothing", lacks, whole, err)
			}
			svc, err := NewService(ServiceOptions{Runner: e.runner()})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			if res, err := svc.CatchUp(ctx, false); err != nil || res != nil {
				t.Fatalf("the origin caught up with the copy's run: %v %+v", err, res)
			}
			if !e.exists(store.KindThread, "mine") {
				t.Fatal("the copy's purge reached the origin")
			}

			// The origin purges "origins": the copy lacks it and replays it.
			e.deleteThread("origins")
			e.at(120 * day)
			if res, _ := e.run(e.runner(), RunRequest{Trigger: TriggerCLI}); res.Purged != 1 {
				t.Fatalf("the origin's run: %+v", res)
			}
			lacks, _, err = cr.Behind(ctx)
			if err != nil || lacks != 1 {
				t.Fatalf("the copy after the origin's purge: lacks %d %v, want 1", lacks, err)
			}
			rep, err := cr.Run(ctx, RunRequest{Trigger: audit.TriggerStart})
			if err != nil || rep.Purged != 1 {
				t.Fatalf("the copy's replay: %v %+v", err, rep)
			}
			if ok, _ := cst.ItemExists(ctx, store.KindThread, "origins"); ok {
				t.Fatal("the origin's purge did not reach the copy")
			}
		})
	}
}

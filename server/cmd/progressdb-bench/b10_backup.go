package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B10: backup and restore. (a) `backup create` (a checkpoint under the
// retention lease, streamed into a tar with its manifest, synced) against
// a plain copy of the data folder (every file read and written, synced);
// (b) `restore` of a backup taken before K purges: the unpack (verified
// copy) and the replay run (K items, then the erase step) timed apart, for
// several K, on the same database.

func runB10(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	small := b.scaled(10_000, 100)
	sizes := []int{small, 4 * small}
	dbs := make([]*seeded, len(sizes))
	for i, n := range sizes {
		sd, err := b10Seed(ctx, b, n)
		if err != nil {
			return sec, err
		}
		defer sd.close()
		dbs[i] = sd
	}
	sec.setup = append(sec.setup,
		fmt.Sprintf("Two databases, of %s and %s threads × 10 messages × 2 versions (every second thread "+
			"soft-deleted 40 days ago, due), each seeded, flushed and compacted; every repetition starts "+
			"from a checkpoint of one.", count(int64(sizes[0])), count(int64(sizes[1]))),
		"**(a)** On the larger database, `backup.Creator.CreateFile` as `progressdb backup create --out FILE` "+
			"runs it: the retention lease, a Pebble checkpoint (log synced) in a staging folder, the "+
			"threads and messages counted, every file hashed, then streamed into "+
			"the tar (or tar.zst) under a temporary name, synced, renamed; the staging folder removed. "+
			"**copy**: every file of the data folder of a stopped server read and written into another "+
			"folder on the same disk, each synced, as `cp -a` and a sync would.",
		"**(b)** A backup is taken, then a retention run with `MAX_ITEMS=K` purges K threads (with "+
			"their messages); `backup.Extract` (unpack with every hash checked, consistency check) "+
			"then a replay run (`trigger: restore`: K items claimed, purged, recorded, then the erase "+
			"step over what they spanned) restore the backup into a new folder. K=0 is a restore with "+
			"nothing to replay. The same K on both databases shows whether the replay's cost follows "+
			"the database (it should not) or what it replays.",
	)
	if err := b10Create(ctx, b, sec, dbs[1]); err != nil {
		return sec, fmt.Errorf("create: %w", err)
	}
	if err := b10Restore(ctx, b, sec, dbs, sizes); err != nil {
		return sec, fmt.Errorf("restore: %w", err)
	}
	return sec, nil
}

// b10Seed seeds a database of n threads, every second one due.
func b10Seed(ctx context.Context, b *bench, n int) (*seeded, error) {
	sd, err := openSeeded(b.dir(fmt.Sprintf("b10-%d", n)))
	if err != nil {
		return nil, err
	}
	g := newGenerator("b10", time.Now())
	if _, err := g.seed(ctx, b, sd.st, fmt.Sprintf("B10: seeding %s threads", count(int64(n))),
		threadsOf("b10", 0, n, 10, 2, 2), false); err != nil {
		sd.close()
		return nil, err
	}
	if err := sd.settle(ctx); err != nil {
		sd.close()
		return nil, err
	}
	return sd, nil
}

// b10Creator makes a backup creator over a fork, its runner the lease holder.
func b10Creator(f *fork) (*backup.Creator, *retention.Runner, error) {
	r, _, err := newRunner(f, pacing{})
	if err != nil {
		return nil, nil, err
	}
	c, err := backup.NewCreator(backup.Options{Store: f.st, Hold: r, Version: "bench",
		Logger: slog.New(slog.DiscardHandler)})
	return c, r, err
}

func b10Create(ctx context.Context, b *bench, sec *section, sd *seeded) error {
	type variant struct {
		name  string
		times []float64
		bytes int64
	}
	vs := []*variant{{name: "backup create (.tar)"}, {name: "backup create (.tar.zst)"}, {name: "copy of the data folder"}}
	var dbBytes int64
	reps := b.reps(3)
	for i := range reps {
		for _, v := range vs {
			if err := ctx.Err(); err != nil {
				return err
			}
			f, err := sd.fork("create")
			if err != nil {
				return err
			}
			dbBytes, _ = dirBytes(f.dbDir())
			out := filepath.Join(f.root, "out")
			if v.name == "copy of the data folder" {
				// A plain copy is taken of a stopped server's folder: a
				// running one changes its files under the copy.
				err = f.st.Close()
				f.st = nil
				if err != nil {
					return err
				}
			}
			start := time.Now()
			switch v.name {
			case "copy of the data folder":
				err = copyDir(f.dbDir(), out)
				if err == nil {
					v.bytes, err = dirBytes(out)
				}
			default:
				var c *backup.Creator
				c, _, err = b10Creator(f)
				if err == nil {
					name := out + ".tar"
					if v.name == "backup create (.tar.zst)" {
						name += ".zst"
					}
					_, _, err = c.CreateFile(ctx, name, true)
					if err == nil {
						var info os.FileInfo
						info, err = os.Stat(name)
						if err == nil {
							v.bytes = info.Size()
						}
					}
				}
			}
			el := time.Since(start)
			if cerr := f.close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			v.times = append(v.times, float64(el))
			b.logf("B10 %s rep %d/%d: %s in %s", v.name, i+1, reps, fmtBytes(float64(v.bytes)), fmtDur(el))
		}
	}
	t := table{
		caption: fmt.Sprintf("**(a) backup against a plain copy**: data folder %s.", fmtBytes(float64(dbBytes))),
		header:  []string{"Method", "Time", "Bytes written", "Time / copy"},
	}
	base := median(vs[2].times)
	for _, v := range vs {
		t.add(v.name, spread(v.times, fmtDurF), fmtBytes(float64(v.bytes)), fmtRatio(median(v.times)/base))
	}
	sec.tables = append(sec.tables, t)
	ratio := median(vs[0].times) / base
	sec.addTarget("backup create (.tar) time / plain copy of the data folder", "≤ 3×",
		fmt.Sprintf("%s (%s / %s)", fmtRatio(ratio), fmtDur(time.Duration(median(vs[0].times))), fmtDur(time.Duration(base))),
		ratio <= 3)
	return nil
}

func b10Restore(ctx context.Context, b *bench, sec *section, dbs []*seeded, sizes []int) error {
	eligible := sizes[0] / 2
	ks := []int{0, max(eligible/100, 1), max(eligible/10, 2), eligible}
	t := table{
		caption: "**(b) restore and replay against the number of replayed items and the database's size**.",
		header: []string{"Database (threads)", "Replayed threads (K)", "Keys replayed", "Unpack + verify",
			"Replay run (erase included)", "The purge run it repeats"},
	}
	replayAt, origAt := map[[2]int]float64{}, map[[2]int]float64{}
	for i, sd := range dbs {
		for _, k := range ks {
			var unpacks, replays, origs []float64
			var keys int64
			for range b.reps(3) {
				o, u, r, n, err := b10RestoreOnce(ctx, sd, k, true)
				if err != nil {
					return fmt.Errorf("%d threads, K=%d: %w", sizes[i], k, err)
				}
				unpacks, replays, keys = append(unpacks, float64(u)), append(replays, float64(r)), n
				origs = append(origs, float64(o))
				b.logf("B10 restore %s threads K=%d: unpack %s, replay %s (%s keys)", count(int64(sizes[i])), k,
					fmtDur(u), fmtDur(r), count(n))
			}
			replayAt[[2]int{i, k}] = median(replays)
			origAt[[2]int{i, k}] = median(origs)
			orig := "–"
			if k > 0 {
				orig = spread(origs, fmtDurF)
			}
			t.add(count(int64(sizes[i])), count(int64(k)), count(keys), spread(unpacks, fmtDurF), spread(replays, fmtDurF), orig)
		}
	}
	sec.tables = append(sec.tables, t)
	// The erase step compacts the key ranges the purged items spanned,
	// which here (messages of all threads interleaved) hold most of the
	// database's tables: it costs what it costs after the original purge.
	// The replay itself (claims, deletes, records) is timed with it off.
	k := ks[2]
	var noErase, origNoErase [2][]float64
	for i, sd := range dbs {
		for range b.reps(3) {
			o, _, r, _, err := b10RestoreOnce(ctx, sd, k, false)
			if err != nil {
				return fmt.Errorf("%d threads, K=%d, erase off: %w", sizes[i], k, err)
			}
			noErase[i] = append(noErase[i], float64(r))
			origNoErase[i] = append(origNoErase[i], float64(o))
			b.logf("B10 restore %s threads K=%d erase off: replay %s, purge run %s", count(int64(sizes[i])), k, fmtDur(r), fmtDur(o))
		}
	}
	te := table{
		caption: fmt.Sprintf("**(b′) %s threads with the erase step off** (`PROGRESSDB_RETENTION_ERASE=false`): "+
			"the replay's own work (claims, deletes, records) beside the purge run it repeats.", count(int64(k))),
		header: []string{"Database (threads)", "Replay run", "The purge run it repeats"},
	}
	for i := range dbs {
		te.add(count(int64(sizes[i])), spread(noErase[i], fmtDurF), spread(origNoErase[i], fmtDurF))
	}
	sec.tables = append(sec.tables, te)
	ratio := median(noErase[1]) / median(origNoErase[1])
	sec.addTarget(fmt.Sprintf("replay of %s threads / the purge run it repeats, erase off (larger database)", count(int64(k))),
		"≤ 1.5×", fmt.Sprintf("%s (%s / %s)", fmtRatio(ratio), fmtDur(time.Duration(median(noErase[1]))),
			fmtDur(time.Duration(median(origNoErase[1])))), ratio <= 1.5)
	sec.notes = append(sec.notes, "Both the replay and the purge run it repeats take longer on the larger "+
		"database for the same K: the purged threads' messages are interleaved with every other thread's in "+
		"the version keyspace, so their deletes touch most of its tables (each opened and its index read on "+
		"first touch in a freshly opened database), and the erase step compacts the ranges they span. What "+
		"the replay adds to the purge itself is what (b) and (b′) compare.")
	big := [2]int{1, eligible}
	rr := replayAt[big] / origAt[big]
	sec.addTarget(fmt.Sprintf("replay of %s threads / the purge run it repeats (larger database)", count(int64(eligible))),
		"≤ 1.5×", fmt.Sprintf("%s (%s / %s)", fmtRatio(rr), fmtDur(time.Duration(replayAt[big])), fmtDur(time.Duration(origAt[big]))),
		rr <= 1.5)
	sec.notes = append(sec.notes, fmt.Sprintf("On the larger database a replay with nothing to replay takes %s, "+
		"and replaying %s threads %s. Unpacking is the copy itself: it grows with the database, not with K.",
		fmtDur(time.Duration(replayAt[[2]int{1, 0}])), count(int64(eligible)), fmtDur(time.Duration(replayAt[[2]int{1, eligible}]))))
	return nil
}

// b10RestoreOnce backs a fork up, purges k threads, restores the backup
// and replays; it returns the unpack and replay times and the keys the
// replay deleted.
func b10RestoreOnce(ctx context.Context, sd *seeded, k int, erase bool) (orig, unpack, replay time.Duration, keys int64, err error) {
	f, err := sd.fork("restore")
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer f.close()
	c, _, err := b10Creator(f)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	archive := filepath.Join(f.root, "b.tar")
	if _, _, err := c.CreateFile(ctx, archive, true); err != nil {
		return 0, 0, 0, 0, err
	}
	if k > 0 {
		r, _, err := newRunner(f, pacing{maxItems: k, noErase: !erase})
		if err != nil {
			return 0, 0, 0, 0, err
		}
		res, el, err := runOnce(ctx, r)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		if res.Purged != int64(k) {
			return 0, 0, 0, 0, fmt.Errorf("the run purged %d, want %d", res.Purged, k)
		}
		orig = el
	}
	dir := filepath.Join(f.root, "restored")
	start := time.Now()
	rep, err := backup.Extract(ctx, archive, dir, nil)
	unpack = time.Since(start)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if !rep.Valid {
		return 0, 0, 0, 0, fmt.Errorf("backup does not verify: %v", rep.Problems)
	}
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer st.Close()
	cfg, err := retentionConfig(f, pacing{noErase: !erase})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg, Logger: slog.New(slog.DiscardHandler),
		Metrics: retention.NewMetrics(nil), Version: "bench"})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	start = time.Now()
	res, err := r.Run(ctx, retention.RunRequest{Trigger: audit.TriggerRestore,
		Replay: retention.ReplayOptions{BackupID: rep.Manifest.BackupID}})
	replay = time.Since(start)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if res.Status != audit.RunCompleted || res.Purged != int64(k) {
		return 0, 0, 0, 0, fmt.Errorf("replay %s purged %d, want %d: %s", res.Status, res.Purged, k, res.Error)
	}
	return orig, unpack, replay, res.KeysDeleted, nil
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return n, err
}

// copyDir copies every regular file of src into a new folder dst, each
// synced: a plain copy of the data folder.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

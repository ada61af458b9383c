package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/progressdb/progressdb/audit"
)

// B8: export before purge. The same runs with PROGRESSDB_RETENTION_EXPORT_PATH
// unset and set, on the same data, side by side: run time and peak Go heap.

// b8Shape is one data set of B8.
type b8Shape struct {
	name     string
	threads  int // eligible threads (as many live ones interleave with them)
	messages int
	versions int
	big      bool // one thread alone, heap target applies
}

func runB8(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	shapes := []b8Shape{
		{name: "one large thread", threads: 1, messages: b.scaled(1_000_000, 1000), versions: 1, big: true},
		{name: "small threads", threads: b.scaled(5000, 20), messages: 10, versions: 2},
	}
	sec.setup = append(sec.setup,
		"Each shape is seeded once, flushed and compacted; every repetition of both variants starts from a "+
			"checkpoint of it, and the variants alternate (off, on, off, on, …) so that drift on a shared "+
			"machine hits both. **off**: `retention.Runner.Run` with the production configuration; "+
			"**on**: the same with `PROGRESSDB_RETENTION_EXPORT_PATH` set to a folder on the same disk, so "+
			"every purged item's full content (thread metadata, every version of every message) is written "+
			"and fsynced before its keys are deleted, in groups of up to 64 items sharing one store sync, one "+
			"gzip member and one export sync; records are compressed on a goroutine of their own while the "+
			"next part is read. The time is the whole run, sealing the export included; CPU time is the "+
			"process's user and system time over the run (Pebble's background work included), less "+
			"sensitive than wall time to other work on a shared machine.",
		fmt.Sprintf("Peak heap growth: `runtime/metrics` `/memory/classes/heap/objects:bytes` sampled every %s, "+
			"peak minus the heap after a forced GC just before the run (as B3).", heapSampleEvery),
		"Shapes: one eligible thread of many messages alone in the database (the memory case), and many "+
			"small eligible threads interleaved with as many live ones (the per-item cost case).",
	)
	for _, sh := range shapes {
		if err := b8Shape1(ctx, b, sec, sh); err != nil {
			return sec, fmt.Errorf("%s: %w", sh.name, err)
		}
	}
	return sec, nil
}

func b8Shape1(ctx context.Context, b *bench, sec *section, sh b8Shape) error {
	label := "B8 " + sh.name
	var ps []threadPlan
	if sh.big {
		ps = []threadPlan{{id: "b8-t00000000", messages: sh.messages, versions: sh.versions, deleted: true}}
	} else {
		ps = threadsOf("b8", 0, 2*sh.threads, sh.messages, sh.versions, 2)
	}
	sd, err := openSeeded(b.dir(fmt.Sprintf("b8-%d", sh.messages)))
	if err != nil {
		return err
	}
	defer sd.close()
	g := newGenerator("b8", time.Now())
	if _, err := g.seed(ctx, b, sd.st, label+": seeding", ps, false); err != nil {
		return err
	}
	if err := sd.settle(ctx); err != nil {
		return err
	}

	type variant struct {
		times, heap []float64
		cpu         []float64
		keys        int64
		exportSize  int64
		exported    int64
	}
	var off, on variant
	reps := b.reps(3)
	for i := range reps {
		for _, exp := range []bool{false, true} {
			if err := ctx.Err(); err != nil {
				return err
			}
			v := &off
			if exp {
				v = &on
			}
			f, err := sd.fork("run")
			if err != nil {
				return err
			}
			r, _, err := newRunner(f, pacing{export: exp})
			if err != nil {
				f.close()
				return err
			}
			hs := startHeapSampler()
			c0 := cpuTime()
			res, el, err := runOnce(ctx, r)
			cpu := cpuTime() - c0
			h := hs.stop()
			size := int64(0)
			if err == nil && exp {
				size, v.exported, err = exportTotals(f.exportDir())
			}
			if cerr := f.close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			v.times = append(v.times, float64(el))
			v.cpu = append(v.cpu, float64(cpu))
			v.heap = append(v.heap, float64(h.peakGrowth))
			v.keys, v.exportSize = res.KeysDeleted, size
			name := "off"
			if exp {
				name = "on"
			}
			b.logf("%s: export %s rep %d/%d: %s items, %s keys in %s (CPU %s), heap growth %s", label, name, i+1, reps,
				count(res.Purged), count(res.KeysDeleted), fmtDur(el), fmtDur(cpu), fmtBytes(float64(h.peakGrowth)))
		}
	}
	if on.keys != off.keys {
		return fmt.Errorf("export on deleted %d keys, off %d", on.keys, off.keys)
	}
	t := table{
		caption: fmt.Sprintf("**%s**: %s eligible thread(s) of %s messages × %d version(s); %s keys purged; "+
			"export file %s (%s records).", sh.name, count(int64(sh.threads)), count(int64(sh.messages)), sh.versions,
			count(on.keys), fmtBytes(float64(on.exportSize)), count(on.exported)),
		header: []string{"Export", "Run time", "CPU time", "Peak heap growth"},
	}
	t.add("off", spread(off.times, fmtDurF), spread(off.cpu, fmtDurF), spread(off.heap, fmtBytes))
	t.add("on", spread(on.times, fmtDurF), spread(on.cpu, fmtDurF), spread(on.heap, fmtBytes))
	ratio := median(on.times) / median(off.times)
	t.add("on / off", fmtRatio(ratio), fmtRatio(median(on.cpu)/median(off.cpu)), fmtRatio(median(on.heap)/max(median(off.heap), 1)))
	sec.tables = append(sec.tables, t)
	sec.addTarget("run time with export / without, "+sh.name, "≤ 1.5×",
		fmt.Sprintf("%s (%s / %s)", fmtRatio(ratio), fmtDur(time.Duration(median(on.times))), fmtDur(time.Duration(median(off.times)))),
		ratio <= 1.5)
	if sh.big {
		hg := median(on.heap)
		sec.addTarget("peak Go heap growth exporting and purging one large thread", "≤ 64 MiB",
			fmt.Sprintf("%s (export file %s)", fmtBytes(hg), fmtBytes(float64(on.exportSize))), hg <= 64<<20)
	}
	return nil
}

// exportTotals sums the sizes of the export files under root and counts
// their records, checking every gzip member (after the timing).
func exportTotals(root string) (size, records int64, err error) {
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		c, err := audit.ScanExport(path)
		if err != nil {
			return err
		}
		size += info.Size()
		records += c.Records
		return nil
	})
	return size, records, err
}

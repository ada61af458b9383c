package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/progressdb/progressdb/client"
	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/attachments"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// B15: attachments (spec §16). Upload and download throughput through the
// real server (in this process) and the Go client (a child process, so
// that this process's CPU time is the server's alone, as B14 counts it),
// beside writing and reading the same bytes to a file with fsync; the
// server's CPU per MiB sealed against plain; and a retention run that
// purges 1,000 attachments.

// b15ClientEnv, set in the environment, makes progressdb-bench B15's
// client instead (runB15Client).
const b15ClientEnv = "PROGRESSDB_BENCH_ATTACH_CLIENT"

// b15Block is what every file repeats: files are made as they are read,
// never held.
const b15Block = 64 << 10

const mib = 1 << 20

// b15Cell is one file size, plain or sealed.
type b15Cell struct {
	size   int64
	n      int // files per repetition
	sealed bool

	upRate, downRate   []float64 // MiB/s
	upCPU, downCPU     []float64 // server CPU, ns per MiB
	upAlloc, downAlloc []float64 // client bytes allocated per file
	heap               []float64 // client heap from the OS after the uploads
}

// b15Disk is one file size written and read back with plain file calls.
type b15Disk struct {
	size        int64
	n           int
	write, read []float64 // MiB/s
}

func runB15(ctx context.Context, b *bench) (*section, error) {
	sec := &section{}
	reps := b.reps(3)
	sizes := []struct {
		size int64
		n    int
	}{{1 * mib, b.scaled(32, 4)}, {16 * mib, b.scaled(4, 2)}}
	purgeN := 1000
	sec.setup = append(sec.setup, fmt.Sprintf(
		"**Throughput**: the real server (`api.New` behind `api.Serve` on 127.0.0.1, a `file://` blob store beside a "+
			"fresh database) and the Go client (`client.UploadAttachment` from a reader that makes the file as it is "+
			"read, its length declared; `client.DownloadAttachment` copied to nowhere) in a child process, one file at a "+
			"time: %d files of 1 MiB, %d of 16 MiB per repetition, after one untimed upload and download. Beside it, "+
			"the same bytes written to files in 32 KiB writes and fsynced (`File.Sync`) one by one, then read back (from "+
			"the page cache, as the server's downloads of files it just stored are). **CPU per MiB**: this process's "+
			"user and system time over the uploads (and the downloads) divided by the MiB moved: the server's work "+
			"alone; sealed is a store with a key store (a local KEK): every 64 KiB segment sealed with AES-256-GCM on "+
			"upload, opened on download. **Client memory**: the child's bytes allocated per file and its heap taken "+
			"from the OS (`HeapSys`) after the uploads: bounded by its buffers, not the file. %d repetitions, "+
			"interleaved; medians, with range.", sizes[0].n, sizes[1].n, reps))
	sec.setup = append(sec.setup, fmt.Sprintf(
		"**Purge**: a thread of %d messages holding %d attachments of 16 KiB (uploaded through `attachments.Blobs`), "+
			"soft-deleted; one retention run with production defaults (`retention.Runner` with the blob store, its "+
			"clock 40 days on) purges the thread and deletes every blob, recording each as an audit item. Beside it, "+
			"%d files of 16 KiB removed with `os.Remove` one by one: the file system's floor.", purgeN/10, purgeN, purgeN))

	var cells []*b15Cell
	var disks []*b15Disk
	for _, sz := range sizes {
		disks = append(disks, &b15Disk{size: sz.size, n: sz.n})
		for _, sealed := range []bool{false, true} {
			cells = append(cells, &b15Cell{size: sz.size, n: sz.n, sealed: sealed})
		}
	}
	var runs, rates, floors, hashCPU []float64
	for rep := range reps {
		hashCPU = append(hashCPU, b15HashCPU())
		for _, d := range disks {
			if err := b15DiskRep(ctx, b.dir("b15", fmt.Sprintf("disk-%d-%d", d.size, rep)), d); err != nil {
				return sec, fmt.Errorf("file baseline: %w", err)
			}
		}
		for _, c := range cells {
			if err := ctx.Err(); err != nil {
				return sec, err
			}
			if err := b15CellRep(ctx, b, c, rep); err != nil {
				return sec, fmt.Errorf("%s, sealed %t: %w", fmtBytes(float64(c.size)), c.sealed, err)
			}
			b.logf("B15 rep %d: %s sealed=%t: upload %.0f MiB/s (%s CPU/MiB), download %.0f MiB/s (%s CPU/MiB)", rep+1,
				fmtBytes(float64(c.size)), c.sealed, last(c.upRate), fmtDurF(last(c.upCPU)), last(c.downRate), fmtDurF(last(c.downCPU)))
		}
		run, floor, err := b15Purge(ctx, b.dir("b15", fmt.Sprintf("purge-%d", rep)), purgeN)
		if err != nil {
			return sec, fmt.Errorf("purge: %w", err)
		}
		runs, rates, floors = append(runs, float64(run)), append(rates, float64(purgeN)/run.Seconds()), append(floors, float64(purgeN)/floor.Seconds())
		b.logf("B15 rep %d: purge of %d attachments in %s", rep+1, purgeN, fmtDur(run))
	}
	b15Report(sec, cells, disks, runs, rates, floors, hashCPU, purgeN)
	return sec, nil
}

// b15Report writes B15's tables and summary rows.
func b15Report(sec *section, cells []*b15Cell, disks []*b15Disk, runs, rates, floors, hashCPU []float64, purgeN int) {
	mibps := func(v float64) string { return fmt.Sprintf("%.0f MiB/s", v) }
	disk := func(size int64) *b15Disk {
		for _, d := range disks {
			if d.size == size {
				return d
			}
		}
		return nil
	}
	t := table{caption: "Throughput through the server and the client, against a file with fsync (write) and read back.",
		header: []string{"file", "store", "upload", "file write + fsync", "upload / file", "download", "file read", "download / file"}}
	for _, c := range cells {
		d := disk(c.size)
		t.add(fmtBytes(float64(c.size)), map[bool]string{false: "plain", true: "sealed"}[c.sealed],
			spread(c.upRate, mibps), spread(d.write, mibps), fmtRatio(median(c.upRate)/median(d.write)),
			spread(c.downRate, mibps), spread(d.read, mibps), fmtRatio(median(c.downRate)/median(d.read)))
	}
	sec.tables = append(sec.tables, t)
	ct := table{caption: "The server's CPU per MiB, and the client's memory.",
		header: []string{"file", "store", "upload CPU/MiB", "download CPU/MiB", "client allocated per upload", "per download", "client heap (HeapSys)"}}
	for _, c := range cells {
		ct.add(fmtBytes(float64(c.size)), map[bool]string{false: "plain", true: "sealed"}[c.sealed],
			spread(c.upCPU, fmtDurF), spread(c.downCPU, fmtDurF), spread(c.upAlloc, fmtBytes), spread(c.downAlloc, fmtBytes),
			spread(c.heap, fmtBytes))
	}
	sec.tables = append(sec.tables, ct)
	pt := table{header: []string{"attachments purged", "retention run", "blobs deleted per second of the run", "os.Remove floor"}}
	pt.add(fmt.Sprint(purgeN), spread(runs, fmtDurF), spread(rates, fmtRate), spread(floors, fmtRate))
	sec.tables = append(sec.tables, pt)

	for _, c := range cells {
		if c.sealed {
			continue
		}
		d := disk(c.size)
		sec.addTarget(fmt.Sprintf("upload / file write with fsync, %s", fmtBytes(float64(c.size))), "recorded",
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(median(c.upRate)/median(d.write)), mibps(median(c.upRate)), mibps(median(d.write))), true)
		sec.addTarget(fmt.Sprintf("download / file read, %s", fmtBytes(float64(c.size))), "recorded",
			fmt.Sprintf("%s (%s vs %s)", fmtRatio(median(c.downRate)/median(d.read)), mibps(median(c.downRate)), mibps(median(d.read))), true)
	}
	for i := 0; i+1 < len(cells); i += 2 {
		plain, sealed := cells[i], cells[i+1]
		for _, op := range []struct {
			name string
			p, s []float64
		}{{"upload", plain.upCPU, sealed.upCPU}, {"download", plain.downCPU, sealed.downCPU}} {
			sec.addTarget(fmt.Sprintf("server CPU per MiB sealed / plain, %s, %s", op.name, fmtBytes(float64(plain.size))), "recorded",
				fmt.Sprintf("%s (%s vs %s)", fmtRatio(median(op.s)/median(op.p)), fmtDurF(median(op.s)), fmtDurF(median(op.p))), true)
		}
	}
	sec.addTarget(fmt.Sprintf("retention run purging %d attachments", purgeN), "recorded",
		fmt.Sprintf("%s, %s blobs deleted", fmtDurF(median(runs)), fmtRate(median(rates))), true)
	plain16 := cells[len(cells)-2]
	sec.notes = append(sec.notes,
		fmt.Sprintf("An upload does more than the file's write: the body crosses HTTP, every byte is hashed (SHA-256, "+
			"the ETag and the audit's checksum: %s of CPU per MiB on its own here, measured in the same run, against "+
			"%s for the whole plain upload of 16 MiB), the blob is written to a temporary file that is fsynced with "+
			"its folder and renamed, and the record is committed to Pebble with a sync. Sealing adds AES-GCM per "+
			"64 KiB segment; a download, which hashes nothing, shows that share more. The client's memory stays that "+
			"of its buffers whatever the file's size.", spread(hashCPU, fmtDurF), fmtDurF(median(plain16.upCPU))),
		fmt.Sprintf("The purge deletes blobs at %s against %s for bare `os.Remove`: each blob's deletion "+
			"syncs its folder before its audit record is written (`attachments.Blobs.Delete`), one fsync per blob; "+
			"syncing each folder once per group of deletions would bring it near the floor.",
			fmtRate(median(rates)), fmtRate(median(floors))),
		"Command: `go run ./server/cmd/progressdb-bench -only B15 -out BENCHMARKS.md`.")
}

// b15HashCPU is this process's CPU time per MiB hashing 16 MiB with
// SHA-256, as an upload hashes every byte.
func b15HashCPU() float64 {
	data := bytes.Repeat(b15BlockBytes(), 16*mib/b15Block)
	c0 := cpuTime()
	sha256.Sum256(data)
	return float64(cpuTime()-c0) / 16
}

// b15Reader yields size bytes of a repeated block, made as they are read.
type b15Reader struct {
	block []byte
	left  int64
}

func newB15Reader(block []byte, size int64) *b15Reader { return &b15Reader{block: block, left: size} }

func (r *b15Reader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	off := int(r.left % int64(len(r.block)))
	n := copy(p[:min(int64(len(p)), r.left)], r.block[off:])
	r.left -= int64(n)
	return n, nil
}

func b15BlockBytes() []byte {
	b := make([]byte, b15Block)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// b15DiskRep writes d.n files of d.size in 32 KiB writes, each fsynced
// and closed, then reads them back.
func b15DiskRep(ctx context.Context, dir string, d *b15Disk) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	block := b15BlockBytes()
	buf := make([]byte, 32<<10)
	start := time.Now()
	for i := range d.n {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return err
		}
		_, err = io.CopyBuffer(f, newB15Reader(block, d.size), buf)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	d.write = append(d.write, float64(int64(d.n)*d.size)/mib/time.Since(start).Seconds())
	start = time.Now()
	for i := range d.n {
		f, err := os.Open(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			return err
		}
		n, err := io.CopyBuffer(io.Discard, f, buf)
		f.Close()
		if err != nil || n != d.size {
			return fmt.Errorf("read back %d of %d bytes: %v", n, d.size, err)
		}
	}
	d.read = append(d.read, float64(int64(d.n)*d.size)/mib/time.Since(start).Seconds())
	return nil
}

// b15CellRep measures one repetition of c: a fresh store and blob store,
// the server, and the client in a child process.
func b15CellRep(ctx context.Context, b *bench, c *b15Cell, rep int) error {
	root := b.dir("b15", fmt.Sprintf("cell-%d-%t-%d", c.size, c.sealed, rep))
	defer os.RemoveAll(root)
	var st *store.Store
	if c.sealed {
		keeper := b13Keeper()
		defer keeper.Close()
		s, err := openSealed(ctx, root, keeper)
		if err != nil {
			return err
		}
		st = s.st
	} else {
		var err error
		if st, err = store.Open(filepath.Join(root, "db"), store.Options{}); err != nil {
			return err
		}
	}
	defer st.Close()
	blobs, err := attachments.Open(ctx, "file://"+filepath.Join(root, "attachments"))
	if err != nil {
		return err
	}
	defer blobs.Close()
	th, err := st.CreateThread(ctx, store.Thread{Title: "files", Author: "ann"})
	if err != nil {
		return err
	}
	m, err := st.AppendMessage(ctx, th.ID, store.Message{Author: "ann", Body: json.RawMessage(`{"text":"see attached"}`)})
	if err != nil {
		return err
	}
	url, _, stop, err := serveAPI(ctx, api.Options{Store: st, Attachments: blobs, AttachmentMaxBytes: 64 * mib}, 1)
	if err != nil {
		return err
	}
	defer stop()
	return b15Drive(ctx, c, url, th.ID, m.ID)
}

// b15Drive runs the client child against url and measures this process's
// CPU time over its uploads, then over its downloads.
func b15Drive(ctx context.Context, c *b15Cell, url, tid, mid string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, "-url", url, "-tid", tid, "-mid", mid,
		"-size", fmt.Sprint(c.size), "-n", fmt.Sprint(c.n))
	cmd.Env = append(os.Environ(), b15ClientEnv+"=1")
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	fail := func(err error) error {
		_ = in.Close()
		return errors.Join(err, cmd.Wait(), errors.New(strings.TrimSpace(errBuf.String())))
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != loadgenReady {
		return fail(errors.New("attachment client: no ready line"))
	}
	moved := float64(int64(c.n)*c.size) / mib
	for _, phase := range []string{"uploaded", "downloaded"} {
		c0, t0 := cpuTime(), time.Now()
		if _, err := io.WriteString(in, "go\n"); err != nil {
			return fail(err)
		}
		if !lines.Scan() {
			return fail(fmt.Errorf("attachment client: no %s line", phase))
		}
		c1, el := cpuTime(), time.Since(t0)
		var alloc, heap float64
		if _, err := fmt.Sscanf(lines.Text(), phase+" %g %g", &alloc, &heap); err != nil {
			return fail(fmt.Errorf("attachment client: %q: %w", lines.Text(), err))
		}
		rate, cpu := moved/el.Seconds(), float64(c1-c0)/moved
		if phase == "uploaded" {
			c.upRate, c.upCPU, c.upAlloc, c.heap = append(c.upRate, rate), append(c.upCPU, cpu), append(c.upAlloc, alloc), append(c.heap, heap)
		} else {
			c.downRate, c.downCPU, c.downAlloc = append(c.downRate, rate), append(c.downCPU, cpu), append(c.downAlloc, alloc)
		}
	}
	_ = in.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("attachment client: %w: %s", err, strings.TrimSpace(errBuf.String()))
	}
	return nil
}

// runB15Client is the child: one untimed upload and download, "ready",
// then on each line from stdin the timed uploads ("uploaded <bytes
// allocated per file> <HeapSys>"), then the downloads of the last one.
func runB15Client(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	set := flag.NewFlagSet("b15 client", flag.ContinueOnError)
	set.SetOutput(stderr)
	url := set.String("url", "", "server URL")
	tid := set.String("tid", "", "thread")
	mid := set.String("mid", "", "message")
	size := set.Int64("size", mib, "file size")
	n := set.Int("n", 1, "files per phase")
	if err := set.Parse(args); err != nil {
		return 2
	}
	ctx := context.Background()
	c, err := client.New(*url)
	if err != nil {
		fmt.Fprintln(stderr, "b15 client:", err)
		return 1
	}
	block := b15BlockBytes()
	var aid string
	upload := func() error {
		a, err := c.UploadAttachment(ctx, *tid, *mid, newB15Reader(block, *size), client.UploadOptions{Size: *size})
		if err == nil && int64(a.Size) != *size {
			err = fmt.Errorf("stored %d bytes, want %d", a.Size, *size)
		}
		if a != nil {
			aid = a.AttachmentId
		}
		return err
	}
	buf := make([]byte, 32<<10)
	download := func() error {
		d, err := c.DownloadAttachment(ctx, *tid, *mid, aid, client.DownloadOptions{})
		if err != nil {
			return err
		}
		defer d.Close()
		got, err := io.CopyBuffer(io.Discard, d, buf)
		if err == nil && got != *size {
			err = fmt.Errorf("downloaded %d bytes, want %d", got, *size)
		}
		return err
	}
	if err := errors.Join(upload(), download()); err != nil {
		fmt.Fprintln(stderr, "b15 client:", err)
		return 1
	}
	fmt.Fprintln(stdout, loadgenReady)
	lines := bufio.NewReader(stdin)
	for _, phase := range []struct {
		name string
		op   func() error
	}{{"uploaded", upload}, {"downloaded", download}} {
		if _, err := lines.ReadString('\n'); err != nil {
			fmt.Fprintln(stderr, "b15 client:", err)
			return 1
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range *n {
			if err := phase.op(); err != nil {
				fmt.Fprintln(stderr, "b15 client:", phase.name, err)
				return 1
			}
		}
		runtime.ReadMemStats(&m1)
		fmt.Fprintf(stdout, "%s %d %d\n", phase.name, (m1.TotalAlloc-m0.TotalAlloc)/uint64(*n), m1.HeapSys)
	}
	return 0
}

// b15Purge seeds n attachments of 16 KiB in a soft-deleted thread and
// times the retention run that purges them, then the removal of as many
// plain files (the floor).
func b15Purge(ctx context.Context, root string, n int) (run, floor time.Duration, err error) {
	defer os.RemoveAll(root)
	st, err := store.Open(filepath.Join(root, "db"), store.Options{})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	blobDir := filepath.Join(root, "attachments")
	blobs, err := attachments.Open(ctx, "file://"+blobDir)
	if err != nil {
		return 0, 0, err
	}
	defer blobs.Close()
	th, err := st.CreateThread(ctx, store.Thread{Title: "files", Author: "ann"})
	if err != nil {
		return 0, 0, err
	}
	block := b15BlockBytes()
	var m store.Message
	for i := range n {
		if i%10 == 0 {
			if m, err = st.AppendMessage(ctx, th.ID, store.Message{Author: "ann", Body: json.RawMessage(`{"text":"files"}`)}); err != nil {
				return 0, 0, err
			}
		}
		if _, err := blobs.Upload(ctx, st, attachments.Upload{Thread: th.ID, Message: m.ID, Body: bytes.NewReader(block[:16<<10]),
			ContentType: "application/octet-stream", MaxBytes: mib, DeclaredSize: 16 << 10}); err != nil {
			return 0, 0, fmt.Errorf("seed attachment %d: %w", i, err)
		}
	}
	if _, err := st.DeleteThread(ctx, th.ID); err != nil {
		return 0, 0, err
	}
	if got := countFiles(blobDir); got != n {
		return 0, 0, fmt.Errorf("seeded %d blobs, want %d", got, n)
	}
	cfg, err := config.Load([]string{
		"PROGRESSDB_DB_PATH=" + filepath.Join(root, "db"),
		"PROGRESSDB_RETENTION_ENABLED=true",
		"PROGRESSDB_RETENTION_PERIOD=" + config.FormatDuration(period),
		"PROGRESSDB_RETENTION_AUDIT_PATH=" + filepath.Join(root, "audit"),
	})
	if err != nil {
		return 0, 0, err
	}
	r, err := retention.NewRunner(retention.RunnerOptions{Store: st, Config: cfg.Retention, Blobs: blobs,
		Logger: slog.New(slog.DiscardHandler), Metrics: retention.NewMetrics(nil), Version: "bench",
		// The thread was deleted now: the run's clock is deletedAge on.
		Now: func() time.Time { return time.Now().Add(deletedAge) }})
	if err != nil {
		return 0, 0, err
	}
	if _, run, err = runOnce(ctx, r); err != nil {
		return 0, 0, err
	}
	if left := countFiles(blobDir); left != 0 {
		return 0, 0, fmt.Errorf("%d blobs left after the run", left)
	}
	floor, err = b15RemoveFloor(filepath.Join(root, "floor"), n, block[:16<<10])
	return run, floor, err
}

// b15RemoveFloor writes n files of data and times removing them.
func b15RemoveFloor(dir string, n int, data []byte) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return 0, err
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), data, 0o640); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for i := range n {
		if err := os.Remove(filepath.Join(dir, fmt.Sprint(i))); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// countFiles counts the files under dir (0 when it does not exist).
func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

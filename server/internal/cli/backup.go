package cli

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// backupReport is what `backup create --json` prints.
type backupReport struct {
	File     string          `json:"file,omitempty"` // absent for --out -
	Database database        `json:"database"`       // the database backed up
	Manifest backup.Manifest `json:"manifest"`
}

// backupCreate makes a backup (spec §10) of the database openTarget
// finds: through a server's admin API, or directly on one opened here.
func (e env) backupCreate(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("backup create", flag.ContinueOnError)
	out := fs.String("out", "", "write the backup to FILE, whose name gives the format (.tar, or .tar.zst compressed), into a folder under its default name, or to standard output with - (never a terminal); default: PROGRESSDB_BACKUP_PATH, or the current folder, under its default name (.tar.zst)")
	zst := fs.Bool("zstd", true, "compress with zstd: the format of --out - (--zstd=false writes a plain tar); a FILE's name gives its own format")
	force := fs.Bool("force", false, "replace an existing --out FILE (never replaced otherwise)")
	asJSON := fs.Bool("json", false, "print the file and its manifest as JSON")
	shard := fs.Int("shard", -1, "in a cluster: the shard to back up, through any node (PROGRESSDB_ADDR or --server), which asks the shard's owner")
	server := serverFlag(fs)
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	compress, why := e.backupFormat(fs, *out, *zst, *force)
	if why != "" {
		fmt.Fprintf(e.stderr, "progressdb backup create: %s\n", why)
		return exitUsage
	}
	cfg, logger, closer, ok := e.configAndLogger()
	if !ok {
		return exitUsage
	}
	defer closer.Close()
	if *server, ok = e.serverOf("backup create", *server, cfg); !ok {
		return exitUsage
	}
	shardUsage := func() int {
		fmt.Fprintln(e.stderr, "progressdb backup create: --shard N is required in a cluster (each shard is a database of its own) and refused elsewhere")
		return exitUsage
	}
	if *server == "" && cfg.Cluster.Enabled() != (*shard >= 0) {
		return shardUsage()
	}
	key, err := app.SigningKey(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb: invalid configuration: %v\n", err)
		return exitUsage
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "progressdb backup create: %v\n", err)
		return exitFailed
	}

	var rep backupReport
	t, err := e.openTarget(ctx, cfg, logger, *server)
	if err != nil {
		fail(err)
		return openExit(err)
	}
	defer t.close()
	switch {
	case t.db.Node != (*shard >= 0):
		return shardUsage()
	case t.c != nil:
		// Into the server's BACKUP_PATH only when it is this shell's too
		// (the server holding PROGRESSDB_DB_PATH, or a node of this
		// environment); a server named by URL streams it here.
		rep, err = e.remoteBackup(ctx, t.c, cfg, *out, compress, *force, *shard, *server == "")
	default:
		rep, err = e.localBackup(ctx, t.st, cfg, logger, key, *out, compress, *force)
		if cerr := t.close(); err == nil {
			err = cerr
		}
	}
	rep.Database = t.acted()
	if *shard >= 0 {
		rep.Database.Shard = shard
	}
	if err != nil {
		return fail(err)
	}
	return e.reportBackup(rep, *out, *asJSON)
}

// backupFormat checks --out, --zstd and --force before anything is done
// and returns the format (compressed or not), or why they are refused: a
// file's name gives its format (.tar or .tar.zst, nothing else, so that
// no name promises a format the file does not have), an existing file is
// kept unless --force, and a terminal never receives the binary archive.
func (e env) backupFormat(fs *flag.FlagSet, out string, zst, force bool) (compress bool, why string) {
	zstdSet := false
	fs.Visit(func(f *flag.Flag) { zstdSet = zstdSet || f.Name == "zstd" })
	if out == "-" {
		if isTerminal(e.stdout) {
			return false, "--out -: standard output is a terminal; redirect it to a file or a pipe, or name a file with --out FILE"
		}
		return zst, ""
	}
	if out == "" {
		if zstdSet && !zst {
			return false, "--zstd=false: a default name is .tar.zst; name a .tar file with --out FILE for a plain tar"
		}
		return true, ""
	}
	info, err := os.Stat(out)
	if err == nil && info.IsDir() {
		if zstdSet && !zst {
			return false, "--zstd=false: a default name is .tar.zst; name a .tar file with --out FILE for a plain tar"
		}
		return true, ""
	}
	compress, err = backup.FormatOf(out)
	switch {
	case err != nil:
		return false, fmt.Sprintf("--out %s: the name must end .tar or .tar.zst, which gives the backup's format", out)
	case zstdSet && zst != compress:
		return false, fmt.Sprintf("--zstd=%t contradicts --out %s, whose name gives the format", zst, out)
	case info != nil && !force:
		return false, fmt.Sprintf("--out %s: the file exists; --force replaces it", out)
	}
	return compress, ""
}

// reportBackup prints what backup create made.
func (e env) reportBackup(rep backupReport, out string, asJSON bool) int {
	switch {
	case out == "-":
		fmt.Fprintf(e.stderr, "progressdb backup create: backup %s of database %s written to standard output (audit head %s)\n",
			rep.Manifest.BackupID, rep.Database, headName(rep.Manifest))
	case asJSON:
		writeJSON(e.stdout, rep)
	default:
		printBackup(e.stdout, rep)
	}
	return exitOK
}

// localBackup makes the backup on a database no server holds.
func (e env) localBackup(ctx context.Context, st *store.Store, cfg config.Config, logger *slog.Logger, key ed25519.PrivateKey, out string, compress, force bool) (backupReport, error) {
	sts, err := app.WithBlobs(ctx, cfg, st)
	if err != nil {
		return backupReport{}, err
	}
	defer sts.Blobs.Close()
	svc, err := app.NewRetention(sts, cfg.Retention, logger, prometheus.NewRegistry(), false, key)
	if err != nil {
		return backupReport{}, err
	}
	defer svc.Close()
	c, err := app.NewBackups(sts, cfg, svc, logger, nil, key)
	if err != nil {
		return backupReport{}, err
	}
	if out == "-" {
		bw := bufio.NewWriterSize(e.stdout, 1<<20)
		m, err := c.Write(ctx, bw, compress)
		if err == nil {
			err = bw.Flush()
		}
		return backupReport{Manifest: m}, err
	}
	m, path, err := c.CreateFile(ctx, target(cfg, out), force)
	return backupReport{File: path, Manifest: m}, err
}

// remoteBackup asks the running server: into its BACKUP_PATH when no
// --out is given and it has one, else as a stream written here. On a
// cluster node shard names the shard (-1 on a single node), whose backups
// go to BACKUP_PATH/shards/<n>/.
func (e env) remoteBackup(ctx context.Context, c *adminClient, cfg config.Config, out string, compress, force bool, shard int, serverPath bool) (backupReport, error) {
	var rep backupReport
	q := url.Values{}
	folder := cfg.Backup.Path
	if shard >= 0 {
		q.Set("shard", strconv.Itoa(shard))
		folder = cluster.ShardBackupPath(cfg.Backup.Path, shard)
	}
	if out == "" && cfg.Backup.Path != "" && serverPath {
		// A backup takes longer than one admin call may: ctx bounds it.
		long := *c
		hc := *c.hc
		hc.Timeout = 0
		long.hc = &hc
		path := "/admin/backups"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		err := long.do(ctx, http.MethodPost, path, nil, &rep.Manifest)
		rep.File = filepath.Join(folder, backup.FileName(rep.Manifest.CreatedAt, rep.Manifest.BackupID))
		return rep, err
	}
	if compress {
		q.Set("compress", "zstd")
	}
	path := "/admin/backups/stream"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	body, err := c.stream(ctx, http.MethodPost, path)
	if err != nil {
		return rep, err
	}
	defer body.Close()
	if out == "-" {
		// The manifest comes first; read it on the way through.
		mr := &manifestPeek{}
		_, err := io.Copy(e.stdout, io.TeeReader(body, mr.writer()))
		rep.Manifest = mr.done()
		return rep, err
	}
	dest := target(cfg, out)
	named := true
	if info, err := os.Stat(dest); err == nil && info.IsDir() {
		// The name holds the backup's ID, known once the stream is read.
		dest, named = filepath.Join(dest, "progressdb-backup-incoming.tar.zst"), false
	}
	receive := func(w io.Writer) error {
		_, err := io.Copy(w, body)
		return err
	}
	if force || !named {
		// The incoming name is this command's own until the ID is known.
		err = backup.WriteAtomic(dest, receive)
	} else {
		err = backup.WriteNew(dest, receive)
	}
	if err != nil {
		return rep, fmt.Errorf("receive the backup: %w", err)
	}
	if rep.Manifest, err = readManifest(dest); err != nil {
		return rep, err
	}
	rep.File = dest
	if !named {
		rep.File = filepath.Join(filepath.Dir(dest), backup.FileName(rep.Manifest.CreatedAt, rep.Manifest.BackupID))
		if err := os.Rename(dest, rep.File); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// target is where a backup goes: --out, or BACKUP_PATH or the current
// folder (the creator names the file there).
func target(cfg config.Config, out string) string {
	switch {
	case out != "":
		return out
	case cfg.Backup.Path != "":
		_ = os.MkdirAll(cfg.Backup.Path, 0o700)
		return cfg.Backup.Path
	}
	return "."
}

// readManifest reads the manifest of a backup file.
func readManifest(path string) (backup.Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return backup.Manifest{}, err
	}
	defer f.Close()
	return manifestOf(f)
}

func manifestOf(r io.Reader) (backup.Manifest, error) {
	var m backup.Manifest
	br := bufio.NewReader(r)
	var src io.Reader = br
	if head, _ := br.Peek(4); len(head) == 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd {
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return m, err
		}
		defer zr.Close()
		src = zr
	}
	tr := tar.NewReader(src)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != backup.ManifestName {
		return m, fmt.Errorf("not a progressdb backup: first entry is not %s", backup.ManifestName)
	}
	if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&m); err != nil {
		return m, fmt.Errorf("read %s: %w", backup.ManifestName, err)
	}
	return m, nil
}

// manifestPeek keeps the first bytes of a stream, enough to hold the
// manifest, and decodes it at the end.
type manifestPeek struct{ buf []byte }

func (p *manifestPeek) writer() io.Writer { return p }

func (p *manifestPeek) Write(b []byte) (int, error) {
	if room := 64<<20 - len(p.buf); room > 0 {
		p.buf = append(p.buf, b[:min(len(b), room)]...)
	}
	return len(b), nil
}

func (p *manifestPeek) done() backup.Manifest {
	m, _ := manifestOf(bytes.NewReader(p.buf))
	return m
}

func headName(m backup.Manifest) string {
	if m.AuditHead.RunID == "" {
		return "none (before the first retention run)"
	}
	return "run " + m.AuditHead.RunID
}

func printBackup(w io.Writer, rep backupReport) {
	m := rep.Manifest
	fmt.Fprintf(w, "backup:      %s\n", rep.File)
	fmt.Fprintf(w, "database:    %s\n", rep.Database)
	fmt.Fprintf(w, "backup_id:   %s\n", m.BackupID)
	fmt.Fprintf(w, "created_at:  %s\n", m.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(w, "contents:    %d threads, %d messages, %d files\n", m.Threads, m.Messages, len(m.Files))
	fmt.Fprintf(w, "audit_head:  %s\n", headName(m))
	fmt.Fprintf(w, "signed:      %t\n", m.Signature != "")
	if m.Sealed {
		fmt.Fprintln(w, "sealed:      true (its key store is in it: restore it with the KEK, into a key-store folder of its own)")
	} else {
		fmt.Fprintln(w, "sealed:      false")
	}
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/progressdb/progressdb/server/internal/backup"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// backupList lists the backups in PROGRESSDB_BACKUP_PATH (spec §10): age,
// expiry, size and the purged items each still holds. It reads the folder
// and the audit trail, not the database, so it needs no server.
func (e env) backupList(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("backup list", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the list as JSON")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	if cfg.Backup.Path == "" {
		fmt.Fprintf(e.stderr, "progressdb backup list: %v: it names the folder whose backups are listed\n", backup.ErrNoBackupPath)
		return exitUsage
	}
	if err := ctx.Err(); err != nil {
		return exitFailed
	}
	list := backup.List
	if cfg.Cluster.Enabled() {
		// A cluster node's backups are per shard, each against the
		// shard's own audit trail.
		list = cluster.ListBackups
	}
	l, err := list(cfg.Backup.Path, cfg.Retention.AuditPath, cfg.Backup.Keep, time.Now())
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb backup list: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		writeJSON(e.stdout, l)
	} else {
		printBackupList(e.stdout, l)
	}
	return exitOK
}

func printBackupList(w io.Writer, l backup.Listing) {
	fmt.Fprintf(w, "backups in %s, deleted after %s (PROGRESSDB_BACKUP_KEEP)\n", l.Path, l.Keep)
	if len(l.Backups) == 0 {
		fmt.Fprintln(w, "no backups")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tCREATED\tAGE\tEXPIRES\tSIZE\tPURGED ITEMS HELD")
	short := false
	for _, b := range l.Backups {
		purged := fmt.Sprint(b.PurgedItems)
		if !b.PurgedItemsComplete {
			purged += " or more"
			short = true
		}
		age := time.Duration(b.Age) * time.Second
		if age > time.Hour {
			age = age.Truncate(time.Minute)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.File, b.CreatedAt.Format(time.RFC3339),
			config.FormatDuration(age), b.ExpiresAt.Format(time.RFC3339), humanSize(b.Size), purged)
	}
	tw.Flush()
	if short {
		fmt.Fprintln(w, "\"or more\": the audit trail after that backup's head does not link up (progressdb audit verify says where)")
	}
}

// humanSize prints bytes in binary units, one decimal.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

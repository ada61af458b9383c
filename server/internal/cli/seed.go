package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/server/internal/app"
	"github.com/progressdb/progressdb/server/internal/seed"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// seed fills PROGRESSDB_DB_PATH with realistic data, deletions back-dated,
// reporting progress on stderr.
func (e env) seed(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	o := seed.Options{Threads: 100, Messages: 20, Versions: 2, Deleted: 0.2, DeletedMessages: seed.DefaultDeletedMessages}
	fs.Var(countFlag{&o.Threads}, "threads", "threads to create")
	fs.Var(countFlag{&o.Messages}, "messages", "messages per thread")
	fs.Var(countFlag{&o.Versions}, "versions", "versions per message, the original included")
	fs.Var(fractionFlag{p: &o.Deleted}, "deleted", "fraction of threads soft-deleted")
	age := &durationFlag{d: 31 * 24 * time.Hour, text: "31d"}
	fs.Var(age, "deleted-age", "how long ago the deletions happened (e.g. 31d, 12h)")
	fs.Var(fractionFlag{p: &o.DeletedMessages, noneBelowZero: true}, "deleted-messages", "fraction of messages in live threads soft-deleted (negative: none)")
	fs.Var(fractionFlag{p: &o.LegalHold}, "legal-hold", "fraction of threads on legal hold")
	fs.Int64Var(&o.Seed, "seed", 1, "random seed (the same seed gives the same data)")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	o.DeletedAge = age.d
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	st, err := openStore(cfg, nil, mayCreate, app.MaySeal)
	if errors.Is(err, store.ErrDatabaseLocked) {
		fmt.Fprintf(e.stderr, "progressdb seed: the database at %s is open in a running server; stop it first\n", cfg.DBPath)
		return exitFailed
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb seed: %v\n", err)
		return openExit(err)
	}
	defer st.Close()

	o.Progress = func(p seed.Progress) {
		fmt.Fprintf(e.stderr, "seed: %d/%d items, %.0f items/s, %s left\n",
			p.Done, p.Total, p.Rate, p.ETA.Round(time.Second))
	}
	stats, err := seed.Run(ctx, st, o)
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb seed: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(e.stdout, "seeded %s: %d threads (%d deleted, %d on legal hold), %d messages (%d deleted), %d versions, %d keys in %s\n",
		cfg.DBPath, stats.Threads, stats.DeletedThreads, stats.LegalHolds, stats.Messages, stats.TombstonedMessages,
		stats.Versions, stats.Keys, stats.Elapsed.Round(time.Millisecond))
	return exitOK
}

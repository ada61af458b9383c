package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/progressdb/progressdb/server/internal/seed"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// seed fills PROGRESSDB_DB_PATH with realistic data, deletions back-dated,
// reporting progress on stderr.
func (e env) seed(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	o := seed.Options{}
	fs.IntVar(&o.Threads, "threads", 100, "threads to create")
	fs.IntVar(&o.Messages, "messages", 20, "messages per thread")
	fs.IntVar(&o.Versions, "versions", 2, "versions per message, the original included")
	fs.Float64Var(&o.Deleted, "deleted", 0.2, "fraction of threads soft-deleted")
	age := fs.String("deleted-age", "31d", "how long ago the deletions happened (e.g. 31d, 12h)")
	fs.Float64Var(&o.DeletedMessages, "deleted-messages", seed.DefaultDeletedMessages, "fraction of messages in live threads soft-deleted (negative: none)")
	fs.Float64Var(&o.LegalHold, "legal-hold", 0, "fraction of threads on legal hold")
	fs.Int64Var(&o.Seed, "seed", 1, "random seed (the same seed gives the same data)")
	if !e.parseFlags(fs, args, false) {
		return exitUsage
	}
	var err error
	if o.DeletedAge, err = config.ParseDuration(*age); err != nil {
		fmt.Fprintf(e.stderr, "progressdb seed: --deleted-age %q: %v\n", *age, err)
		return exitUsage
	}
	cfg, ok := e.loadConfig()
	if !ok {
		return exitUsage
	}
	st, err := openStore(cfg, nil, mayCreate)
	if errors.Is(err, store.ErrDatabaseLocked) {
		fmt.Fprintf(e.stderr, "progressdb seed: the database at %s is open in a running server; stop it first\n", cfg.DBPath)
		return exitFailed
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "progressdb seed: %v\n", err)
		return exitFailed
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

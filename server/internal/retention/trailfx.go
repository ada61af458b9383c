package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// A replicated shard's audit trail is replicated with its data
// (docs/replication-design.md §10): a runner over a replicated store
// writes no audit file itself; its writer hands each step of the file
// (header, each group of records, footer and seal) to the store as a
// command's effect, and every replica writes it into its own shard
// trail when it applies the command (TrailEffects).

// replicateTrail is the audit writer's Replicate of a runner over st: it
// proposes op and returns once this replica wrote it. A proposal always
// gets an outcome (a lost leadership ends it), so no deadline is added.
func replicateTrail(st *store.Store) func(audit.FileOp) error {
	return func(op audit.FileOp) error {
		data, err := op.Encode()
		if err != nil {
			return err
		}
		return st.ProposeEffect(context.Background(), store.EffectTrail, data)
	}
}

// TrailEffects applies the effects of a replicated shard's commands on a
// replica whose shard trail is at auditPath: each is a step of a run's
// audit file (audit.ApplyFileOp). A snapshot brings the leader's trail
// with the database, so every file the log continues is there; one that
// is not (the trail's folder emptied by hand) is logged and passed over:
// its trail lacks that run, and stopping the replica would not bring the
// file back.
func TrailEffects(auditPath string, logger *slog.Logger) store.Effects {
	return func(ctx context.Context, effect []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if auditPath == "" {
			return errors.New("a run's audit lines arrived, and this replica has no audit folder")
		}
		op, err := audit.DecodeFileOp(effect)
		if err != nil {
			return err
		}
		err = audit.ApplyFileOp(auditPath, op)
		if errors.Is(err, audit.ErrFileMissing) {
			logger.Warn("retention_audit_file_missing", "audit_path", auditPath, "file", op.Name, "seq", op.Seq)
			return nil
		}
		if err != nil {
			return fmt.Errorf("shard trail %s: %w", auditPath, err)
		}
		return nil
	}
}

package backup

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/progressdb/progressdb/audit"
	"github.com/progressdb/progressdb/server/internal/retention"
	"github.com/progressdb/progressdb/server/pkg/config"
	"github.com/progressdb/progressdb/server/pkg/erase"
	"github.com/progressdb/progressdb/server/pkg/keystore"
	"github.com/progressdb/progressdb/server/pkg/store"
)

// ErrRefused marks a restore refused for what it was given (a folder, the
// configuration, a backup that needs keys it was not given): the caller
// corrects it and asks again. Nothing was restored, or an unfinished
// restore stays as it was.
var ErrRefused = errors.New("restore refused")

// Replayer runs the replay of a restore (trigger "restore") over the
// restored store: a retention service, or a shard's runner.
type Replayer interface {
	Run(ctx context.Context, req retention.RunRequest) (retention.Result, error)
	// RecordRaises writes the format raises the copy owes the trail.
	RecordRaises(ctx context.Context) error
	Close()
}

// RestoreOptions say what a restore reads, where it puts it and how it
// replays the purges recorded since the backup (spec §10, §10.1).
type RestoreOptions struct {
	// File is the backup archive; when Input is set it is read instead
	// and File only names it. Unused with Resume.
	File  string
	Input io.Reader
	// DB is the folder restored into: absent or empty, or with Resume the
	// folder of a restore whose replay did not complete.
	DB     string
	Resume bool
	// KeepIdentity restores a shard's copy for its move: the database
	// keeps the backup's identity, and no marker waits for the replay
	// (the shard is not served before it is taken). Otherwise the restore
	// makes a new database, which knows its origin and is served only
	// once the replay completes.
	KeepIdentity bool
	// Retention configures the replay; its AuditPath is the
	// authoritative trail, which must exist outside DB. Audit, when set,
	// replaces it (with the lease beside it); on Resume the trail the
	// restore began with is the default.
	Retention config.Retention
	Audit     string
	// KeyStore is where a sealed backup's key store goes, opened with KEK
	// (it needs KEK when set); DefaultKeyStore when empty ("" when
	// sealing is off). On Resume the folder the restore began with.
	KeyStore, DefaultKeyStore, KEK string
	// Attachments is the folder a file:// store's blobs are restored
	// into (the copy's attachments store): absent or empty unless
	// ForceAttachments; the folder beside DB when "". Never inside DB.
	Attachments      string
	ForceAttachments bool
	// PublicKey verifies the manifest and the audit files after the
	// backup's head; AcceptBrokenAudit replays what a trail that does not
	// verify still shows instead of nothing.
	PublicKey         ed25519.PublicKey
	AcceptBrokenAudit bool
	Logger            *slog.Logger
	// Open opens the unpacked database, and the restore leaves it open
	// (a shard's move: the node's shards hold it, sealed with the key
	// store restored into DefaultKeyStore). When nil the restore opens DB
	// itself, sealed with the restored key store, and closes it.
	Open func() (*store.Store, error)
	// NewReplayer builds the replay over the restored store with the
	// restore's retention configuration (Retention with Audit applied).
	NewReplayer func(st *store.Store, rc config.Retention) (Replayer, error)
}

// RestoreResult is what a restore did, as far as it went.
type RestoreResult struct {
	DB    string `json:"db"`
	Audit string `json:"audit"`
	// DatabaseID is the restored database's own identity; OriginID the
	// one it was restored from (spec §10.1).
	DatabaseID string `json:"database_id,omitempty"`
	// KeyStore is where the backup's key store went (sealed content).
	KeyStore string `json:"keystore,omitempty"`
	// Attachments is the folder of the copy's attachments, where a
	// file:// store's blobs went; "" when the backup's blobs stay in a
	// remote store (the original's, which the copy shares).
	Attachments string            `json:"attachments,omitempty"`
	OriginID    string            `json:"origin_id,omitempty"`
	Backup      *Manifest         `json:"backup,omitempty"`
	Problems    []string          `json:"problems,omitempty"` // why the backup does not verify
	Replay      *retention.Result `json:"replay,omitempty"`
}

// restoreError is an error whose message is written for the operator and
// that still answers errors.Is and errors.As for its cause.
type restoreError struct {
	msg string
	err error
}

func (e *restoreError) Error() string { return e.msg }
func (e *restoreError) Unwrap() error { return e.err }

func refused(format string, args ...any) error {
	return &restoreError{msg: fmt.Sprintf(format, args...), err: ErrRefused}
}

// restore is one restore under way.
type restore struct {
	o     RestoreOptions
	rc    config.Retention // the replay's: the trail settled
	ksDir string           // where a sealed backup's key store goes
	blobs string           // where a file:// store's blobs go
	state store.RestoreState
	res   RestoreResult
}

// Restore unpacks a backup into an empty folder, verifying it as it goes,
// opens it and replays every purge the audit trail records after the
// backup's head (spec §10, §10.1). Until the replay completes, the
// folder's marker keeps every command from serving it; a restore with
// Resume finishes it. A backup of sealed content brings its key store,
// restored into KeyStore and opened with KEK: the replay destroys there
// the keys that purges and erasures destroyed since, and erases them from
// its files (spec §12). Errors wrap ErrRefused when the input is at fault
// (nothing touched, or the restore stays unfinished), and
// *retention.LeaseHeldError when the retention lease is held elsewhere.
func Restore(ctx context.Context, o RestoreOptions) (RestoreResult, error) {
	r := &restore{o: o, res: RestoreResult{DB: o.DB}}
	if o.Logger == nil {
		r.o.Logger = slog.Default()
	}
	if err := r.check(); err != nil {
		return r.res, err
	}
	if !o.Resume {
		if err := r.unpack(ctx); err != nil {
			return r.res, err
		}
	}
	return r.res, r.replay(ctx)
}

// check settles the trail and the key store's folder from the options and,
// with Resume, the unfinished restore's marker, and refuses what a restore
// cannot go on with, before anything is touched.
func (r *restore) check() error {
	o := r.o
	if o.Resume {
		st, found, err := store.ReadRestoreState(o.DB)
		switch {
		case err != nil:
			return err
		case !found:
			return refused("%s holds no unfinished restore: nothing to resume", o.DB)
		case st.State != store.RestoreReplaying:
			return &store.UnfinishedRestoreError{Dir: o.DB, State: st}
		}
		r.state = st
	}
	r.rc = o.Retention
	switch {
	case o.Audit != "":
		r.rc.AuditPath = o.Audit
	case o.Resume && r.state.Audit != "":
		r.rc.AuditPath = r.state.Audit
	}
	if r.rc.AuditPath != o.Retention.AuditPath {
		r.rc.LeasePath = filepath.Join(r.rc.AuditPath, "retention.lock")
	}
	r.res.Audit = r.rc.AuditPath
	if !o.Resume {
		if err := CheckEmpty(o.DB); err != nil {
			return refused("%v: a restore goes into an absent or empty folder; nothing was touched", err)
		}
	}
	if inside(r.rc.AuditPath, o.DB) {
		return refused("the audit trail %s lies inside %s: a restore replays the authoritative trail, which must live outside the database folder", r.rc.AuditPath, o.DB)
	}
	// A trail folder that is not there is a typo, not a trail without
	// purges: it is never made here.
	if fi, err := os.Stat(r.rc.AuditPath); err != nil || !fi.IsDir() {
		what := "nothing was touched"
		if o.Resume {
			what = "the restore stays unfinished"
		}
		return refused("no audit trail folder at %s (--audit, or %s by default): a restore replays the purges it records; %s",
			r.rc.AuditPath, config.VarAuditPath, what)
	}
	if err := r.checkBlobs(); err != nil {
		return err
	}
	return r.checkKeyStore()
}

// checkBlobs settles the folder a file:// store's blobs go into.
func (r *restore) checkBlobs() error {
	o := r.o
	switch {
	case o.Resume:
		r.blobs = r.state.Attachments
		return nil
	case o.Attachments != "":
		r.blobs = o.Attachments
	default:
		r.blobs = config.DefaultAttachmentsDir(o.DB)
	}
	if inside(r.blobs, o.DB) || inside(o.DB, r.blobs) {
		return refused("--attachments %s and --db %s overlap: a database folder holds nothing but the database; nothing was touched", r.blobs, o.DB)
	}
	if o.KeepIdentity || o.ForceAttachments {
		return nil // a shard's copy replaces its blobs of the same name
	}
	if err := CheckEmpty(r.blobs); err != nil {
		return refused("%v: the restored attachments go into an absent or empty folder (--attachments DIR, by default the folder beside --db); --force restores into it all the same; nothing was touched", err)
	}
	return nil
}

// into is where the archive is unpacked.
func (r *restore) into() into { return into{db: r.o.DB, keys: r.ksDir, blobs: r.blobs} }

// checkKeyStore settles where a sealed backup's key store goes.
func (r *restore) checkKeyStore() error {
	o := r.o
	switch {
	case o.Resume:
		r.ksDir = r.state.KeyStore // the folder the restore began with
	case o.KeyStore == "":
		r.ksDir = o.DefaultKeyStore
	case o.KEK == "":
		return refused("--keystore needs %s (the KEK of the backup's key store): the replay destroys keys in it; nothing was touched", config.VarKEK)
	default:
		r.ksDir = o.KeyStore
	}
	if r.ksDir != "" && !o.Resume {
		if err := config.CheckOutside(r.ksDir, o.DB); err != nil {
			return refused("--keystore %s: %v; nothing was touched", r.ksDir, err)
		}
	}
	return nil
}

// unpack verifies the backup while it unpacks it into DB (and its key
// store into the key store's folder).
func (r *restore) unpack(ctx context.Context) error {
	o := r.o
	ksDir := r.ksDir
	var rep Report
	var err error
	if o.KeepIdentity {
		rep, err = r.extractCopy(ctx)
	} else {
		trail, aerr := filepath.Abs(r.rc.AuditPath)
		if aerr != nil {
			return aerr
		}
		r.state = store.RestoreState{Backup: o.File, DatabaseID: store.NewDatabaseID(), Audit: trail, Attachments: r.blobs}
		if o.Input != nil {
			rep, err = ExtractPendingReader(ctx, o.File, o.Input, o.DB, ksDir, o.PublicKey, r.state)
		} else {
			rep, err = ExtractPending(ctx, o.File, o.DB, ksDir, o.PublicKey, r.state)
		}
	}
	if errors.Is(err, ErrNotEmpty) {
		return r.keyStoreInUse(err)
	}
	if err != nil {
		return err
	}
	r.res.Backup = &rep.Manifest
	if !rep.Valid && rep.Manifest.Sealed && ksDir == "" {
		return refused("the backup holds sealed content: set %s and %s (or --keystore DIR) to restore it with its keys; nothing was restored",
			config.VarKEK, config.VarKeystorePath)
	}
	if !rep.Valid {
		r.res.Problems = rep.Problems
		return errors.New("the backup does not verify; nothing was restored")
	}
	r.state.BackupID = rep.Manifest.BackupID
	if rep.Manifest.Sealed {
		r.state.KeyStore = ksDir
	}
	if a := rep.Manifest.Attachments; a == nil || a.Store == "file" {
		r.res.Attachments = r.blobs
	}
	return nil
}

// keyStoreInUse is the refusal of a sealed backup whose key store's folder
// (DB was checked before) is not empty: by default the key store of the
// database the restore's environment serves, which a restore never
// writes into.
func (r *restore) keyStoreInUse(err error) error {
	if r.o.KeyStore == "" {
		return &restoreError{msg: fmt.Sprintf("the backup holds a key store, and the folder it would go into, %s (%s, the default of --keystore), is not empty: "+
			"it is the key store of the database this environment serves. Restore the backup's into a folder of its own: --keystore DIR, absent or empty; nothing was restored",
			r.ksDir, config.VarKeystorePath), err: errors.Join(ErrRefused, err)}
	}
	return &restoreError{msg: fmt.Sprintf("--keystore %s is not empty: the backup's key store is restored into an absent or empty folder; nothing was restored",
		r.ksDir), err: errors.Join(ErrRefused, err)}
}

// extractCopy is Extract of the options' archive: the copy keeps the
// backup's identity and holds no marker once unpacked; a sealed shard's
// key store goes into the key store's folder.
func (r *restore) extractCopy(ctx context.Context) (Report, error) {
	if r.o.Input != nil {
		return extract(ctx, r.o.File, r.o.Input, r.into(), r.o.PublicKey, nil)
	}
	f, err := os.Open(r.o.File)
	if err != nil {
		return Report{File: r.o.File}, fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	return extract(ctx, r.o.File, f, r.into(), r.o.PublicKey, nil)
}

// unfinished says, for an error after the unpacking, that the restore
// waits for a resume (a copy kept for a move has no marker to wait on).
func (r *restore) unfinished(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if !r.o.KeepIdentity {
		msg += "; " + r.waiting()
	}
	return &restoreError{msg: msg, err: err}
}

func (r *restore) waiting() string {
	return fmt.Sprintf("the restore is unfinished and nothing serves %s until it is: run 'progressdb restore --resume --db %s'", r.o.DB, r.o.DB)
}

// replay opens the unpacked database, makes it a copy of its own (or keeps
// the backup's identity), replays the trail into it, erases what its key
// store still owed and lets it serve.
func (r *restore) replay(ctx context.Context) error {
	r.res.KeyStore = r.state.KeyStore
	if r.o.Resume {
		r.res.Attachments = r.state.Attachments
	}
	st, keys, closeStore, err := r.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	if !r.o.KeepIdentity {
		lineage, err := st.BecomeCopy(ctx, r.state.DatabaseID, r.state.BackupID)
		if err != nil {
			return r.unfinished(err, "%v", err)
		}
		r.res.DatabaseID, r.res.OriginID = r.state.DatabaseID, lineage.OriginID
		// A replicated shard's backup restores as a one-node copy: the
		// group's log goes, erased, before the replay (docs/backup.md).
		if err := st.DropRaftState(ctx); err != nil {
			return r.unfinished(err, "%v", err)
		}
	}
	svc, err := r.o.NewReplayer(st, r.rc)
	if err != nil {
		return r.unfinished(err, "%v", err)
	}
	defer svc.Close()
	res, err := svc.Run(ctx, retention.RunRequest{Trigger: audit.TriggerRestore, Replay: retention.ReplayOptions{
		BackupID: r.state.BackupID, AcceptBrokenAudit: r.o.AcceptBrokenAudit, PublicKey: r.o.PublicKey}})
	if err := r.replayed(res, err); err != nil {
		return err
	}
	// A copy sealed at its open (or restored with a raise not yet in
	// the trail) has it recorded before it serves.
	if err := svc.RecordRaises(ctx); err != nil {
		return r.unfinished(err, "record the format raise: %v", err)
	}
	if keys != nil {
		// The replay's runs erase what they destroy; this also erases
		// what the backup's own key store still owed (a run killed
		// before its erase), so that no destroyed key is left in any
		// restored file.
		if _, err := keys.Erase(ctx, erase.Options{}); err != nil {
			return r.unfinished(err, "erase the restored key store: %v", err)
		}
	}
	if r.o.KeepIdentity {
		return nil
	}
	if err := store.FinishRestore(r.o.DB); err != nil {
		return r.unfinished(err, "%v", err)
	}
	return nil
}

// replayed judges the replay's outcome.
func (r *restore) replayed(res retention.Result, err error) error {
	var held *retention.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return &restoreError{msg: fmt.Sprintf("the retention lease is held by %s; the files are restored, and %s once it is free",
			held.Holder.Owner, r.waiting()), err: err}
	case res.RunID != "":
		r.res.Replay = &res
	}
	if errors.Is(err, retention.ErrBrokenTrail) && !r.o.KeepIdentity {
		return &restoreError{msg: err.Error() + "; nothing was replayed, " + r.waiting() +
			" once the trail is fixed, or add --accept-broken-audit to replay what it still shows", err: err}
	}
	if err != nil {
		return r.unfinished(err, "%v", err)
	}
	if res.Status != audit.RunCompleted {
		return r.unfinished(nil, "the replay ended %s: %s", res.Status, res.Error)
	}
	return nil
}

// open opens the restored database: with o.Open (left open), or itself
// with the restored key store (closed by the returned func).
func (r *restore) open(ctx context.Context) (*store.Store, *keystore.KeyStore, func(), error) {
	if r.o.Open != nil {
		st, err := r.o.Open()
		if err != nil {
			return nil, nil, nil, r.unfinished(err, "%v", err)
		}
		// Opened sealed with the restored key store, which the replay's
		// erase covers like one the restore opens itself.
		keys, _ := st.KeySealer().(*keystore.KeyStore)
		return st, keys, func() {}, nil
	}
	keys, err := r.openKeys(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := store.Options{Logger: r.o.Logger, Restoring: true}
	if keys != nil {
		opts.Sealer, opts.Closer = keys, keys // never a nil pointer in the interfaces
	}
	st, err := store.Open(r.o.DB, opts)
	if err != nil {
		if keys != nil {
			_ = keys.Close()
		}
		return nil, nil, nil, r.unfinished(err, "%v", err)
	}
	return st, keys, func() { _ = st.Close() }, nil
}

// openKeys opens the key store a sealed backup was restored into (nil
// when the backup was plain) with the KEK.
func (r *restore) openKeys(ctx context.Context) (*keystore.KeyStore, error) {
	dir := r.state.KeyStore
	if dir == "" {
		return nil, nil
	}
	if r.o.KEK == "" {
		return nil, r.unfinished(ErrRefused, "the backup's key store is in %s and %s is not set: the replay needs it", dir, config.VarKEK)
	}
	keeper, err := keystore.OpenKEK(ctx, r.o.KEK)
	if err != nil {
		return nil, r.unfinished(errors.Join(ErrRefused, err), "%v", err)
	}
	ks, err := keystore.Open(ctx, dir, keystore.Options{Keeper: keeper, DataPath: r.o.DB, Logger: r.o.Logger, MustExist: true})
	if errors.Is(err, keystore.ErrWrongKEK) {
		_ = keeper.Close()
		return nil, r.unfinished(err, "%s does not open the backup's key store (restored into %s): set it to the KEK the backup was made with", config.VarKEK, dir)
	}
	if err != nil {
		_ = keeper.Close()
		return nil, r.unfinished(err, "open the restored key store %s: %v", dir, err)
	}
	return ks, nil
}

// inside reports whether path is dir or lies under it.
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	return p == d || strings.HasPrefix(p, d+string(filepath.Separator))
}

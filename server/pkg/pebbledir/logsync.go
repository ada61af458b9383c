package pebbledir

import "github.com/cockroachdb/pebble/v2/vfs"

// walCategory is the write category Pebble creates its log files under.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// logSyncFS calls onSync as each sync of a log file begins: every commit
// that asked to be durable and was written to the log before then is made
// durable by it (the log is synced in order), which is how the store
// counts the writes each fsync carries (group commit's batch size).
type logSyncFS struct {
	vfs.FS
	onSync func()
}

func (l logSyncFS) Unwrap() vfs.FS { return l.FS }

func (l logSyncFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := l.FS.Create(name, category)
	if err != nil || category != walCategory {
		return f, err
	}
	return logFile{File: f, onSync: l.onSync}, nil
}

func (l logSyncFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := l.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || category != walCategory {
		return f, err
	}
	return logFile{File: f, onSync: l.onSync}, nil
}

// logFile is a log file whose syncs are announced.
type logFile struct {
	vfs.File
	onSync func()
}

func (f logFile) Sync() error {
	f.onSync()
	return f.File.Sync()
}

func (f logFile) SyncData() error {
	f.onSync()
	return f.File.SyncData()
}

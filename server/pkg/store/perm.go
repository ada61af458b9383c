package store

import (
	"log/slog"
	"os"
)

// warnIfOpen logs a warning when an existing database folder can be read
// by the group or by others: its files hold every message. Open makes
// new folders and files private (pebbledir).
func warnIfOpen(log *slog.Logger, dir string) {
	info, err := os.Stat(dir)
	if err != nil || log == nil || info.Mode().Perm()&0o044 == 0 {
		return
	}
	log.Warn("db_folder_readable_by_others", "path", dir, "mode", info.Mode().Perm().String(),
		"fix", "chmod 700 "+dir)
}

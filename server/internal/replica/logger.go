package replica

import (
	"context"
	"fmt"
	"log/slog"
)

// raftLogger hands raft's log lines to slog, as one event with the
// group's attributes: raft formats its own messages, so they stay whole.
type raftLogger struct{ log *slog.Logger }

func (l raftLogger) print(level slog.Level, v ...any) {
	l.log.Log(context.Background(), level, "raft", slog.String("line", fmt.Sprint(v...)))
}

func (l raftLogger) printf(level slog.Level, format string, v ...any) {
	l.log.Log(context.Background(), level, "raft", slog.String("line", fmt.Sprintf(format, v...)))
}

func (l raftLogger) Debug(v ...any)                   { l.print(slog.LevelDebug, v...) }
func (l raftLogger) Debugf(format string, v ...any)   { l.printf(slog.LevelDebug, format, v...) }
func (l raftLogger) Info(v ...any)                    { l.print(slog.LevelInfo, v...) }
func (l raftLogger) Infof(format string, v ...any)    { l.printf(slog.LevelInfo, format, v...) }
func (l raftLogger) Warning(v ...any)                 { l.print(slog.LevelWarn, v...) }
func (l raftLogger) Warningf(format string, v ...any) { l.printf(slog.LevelWarn, format, v...) }
func (l raftLogger) Error(v ...any)                   { l.print(slog.LevelError, v...) }
func (l raftLogger) Errorf(format string, v ...any)   { l.printf(slog.LevelError, format, v...) }

// Fatal and Panic are raft's own invariant failures (a corrupt log, a
// broken contract): raft expects no return, and the process stops with
// the stack of the group that broke.
func (l raftLogger) Fatal(v ...any) { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) {
	l.Panicf(format, v...)
}
func (l raftLogger) Panic(v ...any) {
	l.print(slog.LevelError, v...)
	panic(fmt.Sprint(v...))
}
func (l raftLogger) Panicf(format string, v ...any) {
	l.printf(slog.LevelError, format, v...)
	panic(fmt.Sprintf(format, v...))
}

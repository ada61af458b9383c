package app

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/progressdb/progressdb/server/internal/api"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// tokenFiles re-reads the admin token and the API key from their files
// (PROGRESSDB_ADMIN_TOKEN_FILE, PROGRESSDB_API_KEY_FILE) on SIGHUP, so
// that a rotated token takes effect without a restart. A token set by its
// variable stays as it is: the environment of a running process does not
// change. The KEK and the cluster secret are read at start only: the KEK
// changes with `keys rotate-kek`, and the nodes must change the cluster
// secret together.
type tokenFiles struct {
	cfg    config.Config
	tokens *api.Tokens
	logger *slog.Logger
}

// start reloads on SIGHUP until ctx ends; it does nothing when neither
// token comes from a file.
func (f tokenFiles) start(ctx context.Context) {
	if f.cfg.AdminTokenFile == "" && f.cfg.APIKeyFile == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		f.run(ctx, hup)
	}()
}

// run reloads each time a signal comes on hup, until ctx ends.
func (f tokenFiles) run(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			f.reload()
		}
	}
}

// reload reads both files and replaces both tokens, or neither: a file
// that cannot be read, or holds a token no header can carry, keeps the
// tokens in force (and says so), never locking every client out.
func (f tokenFiles) reload() {
	apiKey, adminToken := f.cfg.APIKey, f.cfg.AdminToken
	for _, t := range []struct {
		name, path string
		value      *string
	}{
		{config.VarAdminTokenFile, f.cfg.AdminTokenFile, &adminToken},
		{config.VarAPIKeyFile, f.cfg.APIKeyFile, &apiKey},
	} {
		if t.path == "" {
			continue
		}
		v, err := config.ReadSecretFile(t.name, t.path)
		if err == nil {
			if rule := config.CheckBearer(v); rule != "" {
				err = &config.Error{Var: t.name, Value: t.path, Rule: "holds a secret that " + rule}
			}
		}
		if err != nil {
			f.logger.Error("tokens_reload_failed", "err", err, "kept", "the tokens in force")
			return
		}
		*t.value = v
	}
	f.tokens.Set(apiKey, adminToken)
	f.logger.Info("tokens_reloaded", "admin_token_file", f.cfg.AdminTokenFile, "api_key_file", f.cfg.APIKeyFile)
}

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"unicode"
)

// Every secret the server reads can come from a file instead of a
// variable (spec §12), so that it never has to sit in an environment
// that `ps e`, a crash dump or a child process shows: systemd's
// LoadCredential= and a Kubernetes Secret volume both hand a service a
// file. The audit signing key is a path already.

// Variables of the secrets' files.
const (
	VarAdminTokenFile    = "PROGRESSDB_ADMIN_TOKEN_FILE"
	VarAPIKeyFile        = "PROGRESSDB_API_KEY_FILE"
	VarKEKFile           = "PROGRESSDB_KEK_FILE"
	VarClusterSecretFile = "PROGRESSDB_CLUSTER_SECRET_FILE"
)

// maxSecretFileBytes bounds what a secret's file may hold: a token or a
// KEK URL is short, and a path set by mistake to a large file must not
// be read whole.
const maxSecretFileBytes = 64 << 10

// secretFile pairs a secret's variable with the variable of its file and
// the fields they fill.
type secretFile struct {
	name, fileName string
	value, path    *string
}

// secretFiles lists the secrets that have a file form.
func (c *Config) secretFiles() []secretFile {
	return []secretFile{
		{VarAdminToken, VarAdminTokenFile, &c.AdminToken, &c.AdminTokenFile},
		{VarAPIKey, VarAPIKeyFile, &c.APIKey, &c.APIKeyFile},
		{VarKEK, VarKEKFile, &c.KEK, &c.KEKFile},
		{VarClusterSecret, VarClusterSecretFile, &c.Cluster.Secret, &c.Cluster.SecretFile},
	}
}

// readSecretFiles fills each secret whose …_FILE is set from its file.
// Setting both forms is refused: which one wins would be a guess.
func (c *Config) readSecretFiles() *Error {
	for _, s := range c.secretFiles() {
		if *s.path == "" {
			continue
		}
		if *s.value != "" {
			return &Error{s.fileName, *s.path, "is set and so is " + s.name + ": set one of them (the file form keeps the secret out of the environment)"}
		}
		v, err := readSecret(s.fileName, *s.path)
		if err != nil {
			return err
		}
		*s.value = v
	}
	return nil
}

// ReadSecretFile reads the secret held in the file at path, named by the
// variable name: its content without one trailing newline (as `echo` and
// editors leave it). An unreadable or empty file is an *Error naming the
// variable and the path, never the content.
func ReadSecretFile(name, path string) (string, error) {
	v, err := readSecret(name, path)
	if err != nil {
		return "", err
	}
	return v, nil
}

func readSecret(name, path string) (string, *Error) {
	const rule = "must be a readable file holding the secret alone"
	f, err := os.Open(path)
	if err != nil {
		return "", &Error{name, path, rule + ": " + pathErr(err)}
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && !st.Mode().IsRegular() {
		return "", &Error{name, path, rule + ": not a regular file"}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return "", &Error{name, path, rule + ": " + pathErr(err)}
	}
	if len(b) > maxSecretFileBytes {
		return "", &Error{name, path, rule + fmt.Sprintf(": larger than %d KiB", maxSecretFileBytes>>10)}
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", &Error{name, path, rule + ": the file is empty"}
	}
	return string(b), nil
}

// pathErr is err without the path, which the *Error names already.
func pathErr(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// CheckBearer returns the rule a bearer secret (admin token, API key)
// breaks, or "": a control character (a stray "\r" from a file) cannot be
// sent in a header, and the server trims the spaces around a presented
// token, so either would lock clients out without a word.
func CheckBearer(value string) string {
	if strings.TrimSpace(value) != value || strings.IndexFunc(value, unicode.IsControl) >= 0 {
		return "must not contain control characters or begin or end with a space: no Authorization header could carry it"
	}
	return ""
}

// Warning is a configuration that works but should be changed: the event
// the server logs, the variable and its value (a path or a switch, never
// a secret), and what to do.
type Warning struct {
	Event, Var, Value, Fix string
}

func (w Warning) String() string {
	return w.Var + "=" + fmt.Sprintf("%q", w.Value) + ": " + w.Fix
}

// Warnings lists what serve logs and config check prints as warnings
// about cfg: secrets' files that the group or others can read, and
// sealing without an audit signing key, under which no erasure receipt
// can ever be verified.
func (c Config) Warnings() []Warning {
	var out []Warning
	for _, s := range c.secretFiles() {
		if *s.path == "" {
			continue
		}
		st, err := os.Stat(*s.path)
		if err != nil || st.Mode().Perm()&0o077 == 0 {
			continue
		}
		out = append(out, Warning{Event: "secret_file_readable_by_others", Var: s.fileName, Value: *s.path,
			Fix: "readable by its group or others (mode " + st.Mode().Perm().String() + "); chmod 600 " + *s.path})
	}
	if c.KEK != "" && c.AuditSigningKey == "" {
		out = append(out, Warning{Event: "sealing_without_signing_key", Var: VarAuditSigningKey, Value: "",
			Fix: "is unset while " + VarKEK + " seals content: audit footers go unsigned and no erasure receipt can be verified, " +
				"so the receipt routes refuse; set it to an ed25519 private key (PEM) before erasures are requested"})
	}
	return out
}

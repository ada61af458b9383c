package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// The rules of sealing's two settings (spec §12) live here, where
// configuration is validated; the key store applies the same ones when it
// opens a KEK or a folder.

// ErrInvalidKEK: the KEK's URL cannot be used (empty, unknown scheme, a
// local key that is not exactly 32 bytes of base64). A configuration error.
var ErrInvalidKEK = errors.New("invalid " + VarKEK)

// ErrInsideDataPath: the key store's path is the data directory, inside
// it, or holds it; a copy of the data folder would carry the keys.
var ErrInsideDataPath = errors.New("key store path must be outside the data directory")

// LocalKEKScheme is the scheme of a local key: base64key:// followed by
// the standard base64 of exactly 32 bytes.
const LocalKEKScheme = "base64key"

// KMSSchemes are the schemes of the key management services a KEK may
// live in (gocloud.dev/secrets drivers).
func KMSSchemes() []string { return []string{"awskms", "gcpkms", "azurekeyvault", "hashivault"} }

// ParseKEK checks the form of a KEK URL and returns its scheme and, for a
// local key, its 32 bytes. Errors wrap ErrInvalidKEK and never hold the
// key. A KMS URL is only parsed: its keeper opens in the key store.
func ParseKEK(rawURL string) (scheme string, local [32]byte, err error) {
	kms := strings.Join(KMSSchemes(), ", ")
	if strings.TrimSpace(rawURL) == "" {
		return "", local, fmt.Errorf("%w: empty; set it to a %s:// URL (progressdb keys generate-kek prints one) or a KMS key URL", ErrInvalidKEK, LocalKEKScheme)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "", local, fmt.Errorf("%w: not a URL (want scheme://...): schemes are %s, %s", ErrInvalidKEK, LocalKEKScheme, kms)
	}
	if scheme == LocalKEKScheme {
		local, err = decodeLocalKey(rest)
		return scheme, local, err
	}
	known := false
	for _, s := range KMSSchemes() {
		known = known || s == scheme
	}
	if !known {
		return "", local, fmt.Errorf("%w: unknown scheme %q: schemes are %s, %s", ErrInvalidKEK, scheme, LocalKEKScheme, kms)
	}
	if _, err := url.Parse(rawURL); err != nil {
		return "", local, fmt.Errorf("%w: %s URL does not parse", ErrInvalidKEK, scheme)
	}
	return scheme, local, nil
}

// decodeLocalKey reads the 32 key bytes of a base64key URL. The spec's
// form is standard base64; the URL-safe alphabet gocloud documents is
// accepted too (the two differ only in two characters).
func decodeLocalKey(s string) ([32]byte, error) {
	var key [32]byte
	if s == "" {
		return key, fmt.Errorf("%w: %s:// holds no key (a random key would make every sealed value unreadable after a restart)", ErrInvalidKEK, LocalKEKScheme)
	}
	if strings.ContainsAny(s, "?#") {
		return key, fmt.Errorf("%w: %s:// takes the key alone, no query or fragment", ErrInvalidKEK, LocalKEKScheme)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.URLEncoding.DecodeString(s)
	}
	if err != nil {
		return key, fmt.Errorf("%w: %s:// key is not base64", ErrInvalidKEK, LocalKEKScheme)
	}
	if len(b) != len(key) {
		return key, fmt.Errorf("%w: %s:// key is %d bytes, want exactly 32", ErrInvalidKEK, LocalKEKScheme, len(b))
	}
	copy(key[:], b)
	clear(b)
	return key, nil
}

// CheckOutside refuses a key store path that is the data path, lies
// inside it, or holds it (ErrInsideDataPath), after resolving symbolic
// links of what exists. The key store makes the check again when it opens.
func CheckOutside(ksPath, dataPath string) error {
	ks, err := resolve(ksPath)
	if err != nil {
		return fmt.Errorf("key store path %q: %w", ksPath, err)
	}
	data, err := resolve(dataPath)
	if err != nil {
		return fmt.Errorf("data path %q: %w", dataPath, err)
	}
	if within(ks, data) || within(data, ks) {
		return fmt.Errorf("%w: key store %q, data directory %q", ErrInsideDataPath, ksPath, dataPath)
	}
	return nil
}

// resolve makes p absolute and resolves the symbolic links of its longest
// existing part; the rest, not created yet, is joined as it is.
func resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	cur := abs
	for {
		if _, err := os.Lstat(cur); err == nil {
			real, err := filepath.EvalSymlinks(cur)
			if err != nil {
				return "", err
			}
			return filepath.Join(real, rest), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

package keystore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"
)

// VarKEK is the environment variable that holds the KEK's URL. Errors about
// the KEK name it and never hold its value.
const VarKEK = "PROGRESSDB_KEK"

// ErrInvalidKEK: the KEK's URL cannot be used (empty, unknown scheme, a
// local key that is not exactly 32 bytes of base64). A configuration error.
var ErrInvalidKEK = errors.New("invalid " + VarKEK)

// LocalScheme is the scheme of a local key: base64key:// followed by the
// standard base64 of exactly 32 bytes.
const LocalScheme = "base64key"

// kmsSchemes are the gocloud.dev/secrets schemes of the key management
// services a KEK may live in. Their drivers are registered by importing
// them; one that is not compiled in fails at OpenKEK, naming its scheme.
var kmsSchemes = []string{"awskms", "gcpkms", "azurekeyvault", "hashivault"}

// OpenKEK opens the keeper of a KEK URL. A local key is decoded here and
// never handed to gocloud's URL opener, which makes up a random key when
// the URL holds none and cuts standard base64 at its first '/'.
func OpenKEK(ctx context.Context, rawURL string) (*secrets.Keeper, error) {
	if strings.TrimSpace(rawURL) == "" {
		return nil, fmt.Errorf("%w: empty; set it to a %s:// URL (progressdb keys generate-kek prints one) or a KMS key URL", ErrInvalidKEK, LocalScheme)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("%w: not a URL (want scheme://...): schemes are %s, %s", ErrInvalidKEK, LocalScheme, strings.Join(kmsSchemes, ", "))
	}
	if scheme == LocalScheme {
		key, err := decodeLocalKey(rest)
		if err != nil {
			return nil, err
		}
		return localsecrets.NewKeeper(key), nil
	}
	known := false
	for _, s := range kmsSchemes {
		known = known || s == scheme
	}
	if !known {
		return nil, fmt.Errorf("%w: unknown scheme %q: schemes are %s, %s", ErrInvalidKEK, scheme, LocalScheme, strings.Join(kmsSchemes, ", "))
	}
	if _, err := url.Parse(rawURL); err != nil {
		return nil, fmt.Errorf("%w: %s URL does not parse", ErrInvalidKEK, scheme)
	}
	k, err := secrets.OpenKeeper(ctx, rawURL)
	if err != nil {
		// A KMS URL names a key, it holds no secret: its error may show it.
		return nil, fmt.Errorf("%w: open %s keeper: %w", ErrInvalidKEK, scheme, err)
	}
	return k, nil
}

// decodeLocalKey reads the 32 key bytes of a base64key URL. The spec's
// form is standard base64; the URL-safe alphabet gocloud documents is
// accepted too (the two differ only in two characters).
func decodeLocalKey(s string) ([32]byte, error) {
	var key [32]byte
	if s == "" {
		return key, fmt.Errorf("%w: %s:// holds no key (a random key would make every sealed value unreadable after a restart)", ErrInvalidKEK, LocalScheme)
	}
	if strings.ContainsAny(s, "?#") {
		return key, fmt.Errorf("%w: %s:// takes the key alone, no query or fragment", ErrInvalidKEK, LocalScheme)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.URLEncoding.DecodeString(s)
	}
	if err != nil {
		return key, fmt.Errorf("%w: %s:// key is not base64", ErrInvalidKEK, LocalScheme)
	}
	if len(b) != len(key) {
		return key, fmt.Errorf("%w: %s:// key is %d bytes, want exactly 32", ErrInvalidKEK, LocalScheme, len(b))
	}
	copy(key[:], b)
	clear(b)
	return key, nil
}

// GenerateKEK returns a fresh local KEK URL: 32 random bytes, standard
// base64.
func GenerateKEK() (string, error) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return "", fmt.Errorf("generate kek: %w", err)
	}
	defer clear(key[:])
	return LocalScheme + "://" + base64.StdEncoding.EncodeToString(key[:]), nil
}

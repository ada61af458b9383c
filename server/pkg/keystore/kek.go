package keystore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"gocloud.dev/secrets"
	"gocloud.dev/secrets/localsecrets"

	"github.com/progressdb/progressdb/server/pkg/config"
)

// VarKEK is the environment variable that holds the KEK's URL. Errors about
// the KEK name it and never hold its value.
const VarKEK = config.VarKEK

// ErrInvalidKEK: the KEK's URL cannot be used (empty, unknown scheme, a
// local key that is not exactly 32 bytes of base64). A configuration error.
var ErrInvalidKEK = config.ErrInvalidKEK

// LocalScheme is the scheme of a local key: base64key:// followed by the
// standard base64 of exactly 32 bytes.
const LocalScheme = config.LocalKEKScheme

// OpenKEK opens the keeper of a KEK URL, whose form config.ParseKEK
// checks. The KMS drivers are registered by importing them (drivers.go). A
// local key is decoded there and never handed to gocloud's URL opener,
// which makes up a random key when the URL holds none and cuts standard
// base64 at its first '/'.
func OpenKEK(ctx context.Context, rawURL string) (*secrets.Keeper, error) {
	scheme, key, err := config.ParseKEK(rawURL)
	if err != nil {
		return nil, err
	}
	if scheme == LocalScheme {
		defer clear(key[:])
		return localsecrets.NewKeeper(key), nil
	}
	k, err := secrets.OpenKeeper(ctx, rawURL)
	if err != nil {
		// A KMS URL names a key, it holds no secret: its error may show it.
		return nil, fmt.Errorf("%w: open %s keeper: %w", ErrInvalidKEK, scheme, err)
	}
	return k, nil
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

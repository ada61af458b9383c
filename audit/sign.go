package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Signing: a footer's signature is the ed25519 signature of the footer's
// chain hash, the hex SHA-256 of the footer line as written without its
// signature key (SignatureMessage). The hash covers the footer's own
// fields and, through prev, every line before it; the next file's
// prev_file covers the signed line. Someone who can write the folder but
// does not hold the private key can no longer rewrite a file and every file
// after it: the signatures would not verify.

// ErrBadKey is returned for a key file that does not hold an ed25519 key.
var ErrBadKey = errors.New("not an ed25519 key in PEM")

// maxKeyFile bounds what a key load reads: a PEM ed25519 key is ~120 bytes.
const maxKeyFile = 64 << 10

// encodeFooter renders a footer line, signed when key is set.
func encodeFooter(at time.Time, runID string, seq int64, prev string, f Footer, key ed25519.PrivateKey) ([]byte, error) {
	f.Signature = ""
	line, err := encodeLine(MsgFooter, at, runID, seq, prev, f)
	if err != nil || key == nil {
		return line, err
	}
	f.Signature = sign(key, line)
	return encodeLine(MsgFooter, at, runID, seq, prev, f)
}

// SignatureMessage returns what a signed footer line's signature signs:
// the hex SHA-256 of the line without its `,"signature":"…"` member. ok is
// false when the line carries no signature, or carries it more than once.
func SignatureMessage(footerLine []byte, signature string) (msg []byte, ok bool) {
	if signature == "" {
		return nil, false
	}
	member := []byte(`,"signature":"` + signature + `"`)
	if bytes.Count(footerLine, member) != 1 {
		return nil, false
	}
	return []byte(lineHash(bytes.Replace(footerLine, member, nil, 1))), true
}

// sign returns the signature member value for an unsigned footer line.
func sign(key ed25519.PrivateKey, unsigned []byte) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, []byte(lineHash(unsigned))))
}

// SignJSON signs a one-line JSON object that carries no signature yet and
// returns the value of the `"signature"` member to append as its last
// member: the same scheme as footers (SignatureMessage), for other signed
// documents such as a backup's manifest.
func SignJSON(key ed25519.PrivateKey, unsigned []byte) string { return sign(key, unsigned) }

// CheckJSONSignature reports why a one-line JSON object does not carry a
// valid signature member by pub, or "" when it does.
func CheckJSONSignature(pub ed25519.PublicKey, line []byte, signature string) string {
	if signature == "" {
		return "not signed"
	}
	raw, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return "signature is not a base64 ed25519 signature"
	}
	msg, ok := SignatureMessage(line, signature)
	if !ok || !ed25519.Verify(pub, msg, raw) {
		return "signature does not verify with the public key"
	}
	return ""
}

// checkSignature reports why a footer does not carry a valid signature by
// pub, or "" when it does.
func checkSignature(pub ed25519.PublicKey, rec *Record) string {
	sig := rec.Footer.Signature
	if sig == "" {
		return "footer is not signed"
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return "footer signature is not a base64 ed25519 signature"
	}
	msg, ok := SignatureMessage(rec.Raw, sig)
	if !ok || !ed25519.Verify(pub, msg, raw) {
		return "footer signature does not verify with the public key"
	}
	return ""
}

// LoadSigningKey reads an ed25519 private key from a PEM file (PKCS #8,
// "PRIVATE KEY", as `openssl genpkey -algorithm ed25519` writes it).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: %w: PEM block is %q, want \"PRIVATE KEY\" (PKCS #8)", path, ErrBadKey, block.Type)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrBadKey, err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w: the key is %T", path, ErrBadKey, key)
	}
	return priv, nil
}

// LoadPublicKey reads an ed25519 public key from a PEM file ("PUBLIC KEY",
// as `openssl pkey -pubout` writes it); a private key file is accepted too.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	block, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	if block.Type == "PRIVATE KEY" {
		priv, err := LoadSigningKey(path)
		if err != nil {
			return nil, err
		}
		return priv.Public().(ed25519.PublicKey), nil
	}
	if block.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%s: %w: PEM block is %q, want \"PUBLIC KEY\"", path, ErrBadKey, block.Type)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrBadKey, err)
	}
	pub, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: %w: the key is %T", path, ErrBadKey, key)
	}
	return pub, nil
}

func readPEM(path string) (*pem.Block, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return nil, fmt.Errorf("read key %s: %w", path, err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: %w: no PEM block", path, ErrBadKey)
	}
	return block, nil
}

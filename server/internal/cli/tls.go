package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/progressdb/progressdb/server/pkg/config"
)

// serverTLS is how the command line talks TLS to a server (spec §14): it
// verifies the server's certificate with PROGRESSDB_TLS_CA_FILE (in a
// cluster node's environment without it, with the cluster CA; else with
// the system's CAs) and presents PROGRESSDB_TLS_CLIENT_CERT_FILE when set,
// for a server whose admin routes require a client certificate.
func serverTLS(cfg config.Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if name, path := caSetting(cfg), caFile(cfg); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, path, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("%s=%q: no PEM certificate in it", name, path)
		}
	}
	if t := cfg.TLS; t.ClientCertFile != "" {
		pair, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s=%q, %s=%q: %w", config.VarTLSClientCert, t.ClientCertFile, config.VarTLSClientKey, t.ClientKeyFile, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// caFile is the CA file that verifies servers; "" for the system's CAs.
func caFile(cfg config.Config) string {
	if cfg.TLS.CAFile == "" && cfg.ClusterTLS() {
		return cfg.Cluster.TLSCA
	}
	return cfg.TLS.CAFile
}

// caSetting names what verifies servers, for messages.
func caSetting(cfg config.Config) string {
	if cfg.TLS.CAFile == "" && cfg.ClusterTLS() {
		return config.VarClusterTLSCA
	}
	if cfg.TLS.CAFile == "" {
		return "the system's CAs (set " + config.VarTLSCA + " to name a CA file)"
	}
	return config.VarTLSCA
}

// reachError is the error of a call that got no answer; a server
// certificate that could not be verified names what verified it.
func (c *adminClient) reachError(err error) error {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
	)
	if errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verify) {
		return fmt.Errorf("reach the server at %s: its certificate was not verified with %s: %w", c.base, c.caVar, err)
	}
	return fmt.Errorf("reach the server at %s: %w", c.base, err)
}

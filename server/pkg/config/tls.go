package config

import (
	"net/url"
	"os"
)

// TLS is the PROGRESSDB_TLS_* group (spec §14): the server's certificate,
// the CA of the client certificates its admin routes require, and, for
// the command line, the CA that verifies a server and a client
// certificate to present to it. (Field names are unique across groups:
// they map to variables.)
type TLS struct {
	// CertFile and KeyFile turn the listener into HTTPS only.
	CertFile string `env:"CERT_FILE"`
	KeyFile  string `env:"KEY_FILE"`
	// ClientCAFile, when set, makes /admin require a client certificate
	// signed by it, besides the admin token.
	ClientCAFile string `env:"CLIENT_CA_FILE"`
	// CAFile verifies the server the command line talks to.
	CAFile string `env:"CA_FILE"`
	// ClientCertFile and ClientKeyFile are the command line's client
	// certificate, for a server whose admin routes require one.
	ClientCertFile string `env:"CLIENT_CERT_FILE"`
	ClientKeyFile  string `env:"CLIENT_KEY_FILE"`
}

// TLS variables.
const (
	VarTLSCert       = "PROGRESSDB_TLS_CERT_FILE"
	VarTLSKey        = "PROGRESSDB_TLS_KEY_FILE"
	VarTLSClientCA   = "PROGRESSDB_TLS_CLIENT_CA_FILE"
	VarTLSCA         = "PROGRESSDB_TLS_CA_FILE"
	VarTLSClientCert = "PROGRESSDB_TLS_CLIENT_CERT_FILE"
	VarTLSClientKey  = "PROGRESSDB_TLS_CLIENT_KEY_FILE"
)

// ServesTLS reports whether the listener serves HTTPS: with a server
// certificate, or on a cluster node with its cluster certificate.
func (c Config) ServesTLS() bool {
	return c.TLS.CertFile != "" || (c.Cluster.Enabled() && c.Cluster.TLSCert != "")
}

// ClusterTLS reports whether the nodes talk with mutual TLS.
func (c Config) ClusterTLS() bool { return c.Cluster.Enabled() && c.Cluster.TLSCert != "" }

// file is a setting that names a file.
type file struct{ name, path string }

// checkFiles refuses a set file that is not a readable regular file; the
// files' content is checked when they are loaded (app).
func checkFiles(files []file) *Error {
	for _, f := range files {
		if f.path == "" {
			continue
		}
		st, err := os.Stat(f.path)
		if err == nil && st.Mode().IsRegular() {
			var fh *os.File
			if fh, err = os.Open(f.path); err == nil {
				fh.Close()
			}
		}
		if err != nil || !st.Mode().IsRegular() {
			return &Error{f.name, f.path, "must be a readable PEM file"}
		}
	}
	return nil
}

// pairError refuses a certificate set without its key or a key without
// its certificate.
func pairError(certVar, cert, keyVar, key string) *Error {
	if (cert == "") == (key == "") {
		return nil
	}
	name, value := keyVar, key
	if cert == "" {
		name, value = certVar, cert
	}
	return &Error{name, value, "a certificate and its key go together: set both " + certVar + " and " + keyVar + " or neither"}
}

// validateTLS checks the PROGRESSDB_TLS_* group.
func (c Config) validateTLS(map[string]string) *Error {
	t := c.TLS
	if err := pairError(VarTLSCert, t.CertFile, VarTLSKey, t.KeyFile); err != nil {
		return err
	}
	if err := pairError(VarTLSClientCert, t.ClientCertFile, VarTLSClientKey, t.ClientKeyFile); err != nil {
		return err
	}
	if err := checkFiles([]file{
		{VarTLSCert, t.CertFile}, {VarTLSKey, t.KeyFile}, {VarTLSClientCA, t.ClientCAFile},
		{VarTLSCA, t.CAFile}, {VarTLSClientCert, t.ClientCertFile}, {VarTLSClientKey, t.ClientKeyFile},
	}); err != nil {
		return err
	}
	if t.ClientCAFile != "" && !c.ServesTLS() {
		return &Error{VarTLSClientCA, t.ClientCAFile, "needs " + VarTLSCert + " (or, on a cluster node, " + VarClusterTLSCert +
			"): client certificates are asked for over TLS only"}
	}
	return nil
}

// validateClusterTLS checks the nodes' mutual TLS settings: all three or
// none, and, on a node, an advertise URL the other nodes reach over TLS.
func (c Config) validateClusterTLS(node bool) *Error {
	cl := c.Cluster
	set := []file{{VarClusterTLSCA, cl.TLSCA}, {VarClusterTLSCert, cl.TLSCert}, {VarClusterTLSKey, cl.TLSKey}}
	some := cl.TLSCA != "" || cl.TLSCert != "" || cl.TLSKey != ""
	for _, f := range set {
		if some && f.path == "" {
			return &Error{f.name, "", "mutual TLS between the nodes needs all three of " + VarClusterTLSCA + ", " +
				VarClusterTLSCert + " and " + VarClusterTLSKey + ", or none"}
		}
	}
	if err := checkFiles(set); err != nil {
		return err
	}
	if !node {
		return nil
	}
	u, _ := url.Parse(c.AdvertiseURL) // validateNode checked it
	switch {
	case some && u.Scheme != "https":
		return &Error{VarAdvertiseURL, c.AdvertiseURL, "must be an https:// URL when " + VarClusterTLSCert +
			" is set: the other nodes reach this one over mutual TLS"}
	case c.ServesTLS() && u.Scheme != "https":
		return &Error{VarAdvertiseURL, c.AdvertiseURL, "must be an https:// URL when " + VarTLSCert +
			" is set: the listener serves HTTPS only"}
	case c.TLS.ClientCAFile != "" && !some:
		// A node forwards a client's admin call with its own certificate,
		// which only mutual TLS lets the receiver check.
		return &Error{VarTLSClientCA, c.TLS.ClientCAFile, "needs mutual TLS between the nodes (" + VarClusterTLSCert +
			") on a cluster node: the nodes forward admin calls to each other"}
	}
	return nil
}

// redactedTLS lists the TLS settings for Redacted.
func (c Config) redactedTLS() [][2]string {
	t := c.TLS
	return [][2]string{
		{VarTLSCert, unsetIfEmpty(t.CertFile)},
		{VarTLSKey, unsetIfEmpty(t.KeyFile)},
		{VarTLSClientCA, unsetIfEmpty(t.ClientCAFile)},
		{VarTLSCA, unsetIfEmpty(t.CAFile)},
		{VarTLSClientCert, unsetIfEmpty(t.ClientCertFile)},
		{VarTLSClientKey, unsetIfEmpty(t.ClientKeyFile)},
	}
}

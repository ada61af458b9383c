// Package certs holds the TLS material of a server (spec §14): key pairs
// reloaded from their files on SIGHUP and when the files change, the CA
// pools that client and node certificates are checked against, the checks
// themselves (Guard), and the certificates' expiry metric.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// FileError is a certificate, key or CA file that cannot be used, naming
// the setting that names it.
type FileError struct {
	Var, Path, Rule string
	Err             error
}

func (e *FileError) Error() string { return fmt.Sprintf("%s=%q: %s: %v", e.Var, e.Path, e.Rule, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// Pair is a certificate and its key, read from files and swapped whole
// (an atomic pointer) by Reload: a handshake takes the pair in force when
// it starts, and connections already open keep theirs.
type Pair struct {
	certVar, certFile string
	keyVar, keyFile   string
	cur               atomic.Pointer[loaded]
}

// loaded is one reading of the files.
type loaded struct {
	cert      *tls.Certificate
	certStat  os.FileInfo
	keyStat   os.FileInfo
	readError string // the last failed reading's error, so a watch logs it once
}

// LoadPair reads the certificate and key files; the errors are
// *FileError naming certVar or keyVar.
func LoadPair(certVar, certFile, keyVar, keyFile string) (*Pair, error) {
	p := &Pair{certVar: certVar, certFile: certFile, keyVar: keyVar, keyFile: keyFile}
	l, err := p.read()
	if err != nil {
		return nil, err
	}
	p.cur.Store(l)
	return p, nil
}

// read reads and checks both files.
func (p *Pair) read() (*loaded, error) {
	certStat, err1 := os.Stat(p.certFile)
	keyStat, err2 := os.Stat(p.keyFile)
	certPEM, err := os.ReadFile(p.certFile)
	if err = errors.Join(err, err1); err != nil {
		return nil, &FileError{p.certVar, p.certFile, "must be a readable PEM file", err}
	}
	keyPEM, err := os.ReadFile(p.keyFile)
	if err = errors.Join(err, err2); err != nil {
		return nil, &FileError{p.keyVar, p.keyFile, "must be a readable PEM file", err}
	}
	if !hasBlock(certPEM, "CERTIFICATE") {
		return nil, &FileError{p.certVar, p.certFile, "must hold a PEM certificate", errors.New("no CERTIFICATE block found")}
	}
	if !hasBlock(keyPEM, "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY") {
		return nil, &FileError{p.keyVar, p.keyFile, "must hold a PEM private key", errors.New("no PRIVATE KEY block found")}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{p.keyVar, p.keyFile, "must be the private key of the certificate in " + p.certVar, err}
	}
	return &loaded{cert: &cert, certStat: certStat, keyStat: keyStat}, nil
}

// hasBlock reports whether data holds a PEM block of one of the types.
func hasBlock(data []byte, types ...string) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		for _, t := range types {
			if b.Type == t {
				return true
			}
		}
	}
}

// Reload reads the files again and puts the new pair in force for the
// handshakes that follow; on an error the pair in force stays.
func (p *Pair) Reload() error {
	l, err := p.read()
	if err != nil {
		return err
	}
	p.cur.Store(l)
	return nil
}

// Leaf is the certificate in force.
func (p *Pair) Leaf() *x509.Certificate { return p.cur.Load().cert.Leaf }

// GetCertificate is tls.Config.GetCertificate: the pair in force.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.cur.Load().cert, nil
}

// GetClientCertificate is tls.Config.GetClientCertificate: the pair in
// force, presented whatever CAs the server names.
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.cur.Load().cert, nil
}

// changed reports whether either file is not the one last read: replaced
// by a rename (a Kubernetes Secret's volume swaps a link), or rewritten.
func (p *Pair) changed() bool {
	l := p.cur.Load()
	return fileChanged(l.certStat, p.certFile) || fileChanged(l.keyStat, p.keyFile)
}

func fileChanged(was os.FileInfo, path string) bool {
	now, err := os.Stat(path)
	if err != nil {
		return false // gone for a moment while replaced: look again later
	}
	return !os.SameFile(was, now) || !was.ModTime().Equal(now.ModTime()) || was.Size() != now.Size()
}

// DefaultWatchInterval is how often Watch looks at the files: a change is
// in force within 10 s (spec §14).
const DefaultWatchInterval = 2 * time.Second

// Reloader reloads pairs on a signal and when their files change.
type Reloader struct {
	Pairs    map[string]*Pair // by the name the logs and the metric give them
	Interval time.Duration    // DefaultWatchInterval when 0
	Logger   *slog.Logger
	// Reloaded, when set, is called after each reload of a pair (tests).
	Reloaded func(name string, err error)
}

// Run reloads every pair when a signal comes on hup (SIGHUP) and each pair whose
// files changed at every interval, until ctx ends. A failed reading
// (a file half-written, a key that does not match yet) keeps the pair in
// force and is retried.
func (r *Reloader) Run(ctx context.Context, hup <-chan os.Signal) {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	logger := r.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failed := map[string]string{}
	reload := func(name string, p *Pair, why string) {
		err := p.Reload()
		switch {
		case err == nil:
			delete(failed, name)
			leaf := p.Leaf()
			logger.Info("tls_certificate_reloaded", "cert", name, "why", why, "subject", leaf.Subject.String(),
				"not_after", leaf.NotAfter)
		case failed[name] != err.Error():
			failed[name] = err.Error()
			logger.Error("tls_certificate_reload_failed", "cert", name, "why", why, "err", err)
		}
		if r.Reloaded != nil {
			r.Reloaded(name, err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			for name, p := range r.Pairs {
				reload(name, p, "sighup")
			}
		case <-tick.C:
			for name, p := range r.Pairs {
				if p.changed() {
					reload(name, p, "file_changed")
				}
			}
		}
	}
}

// LoadPool reads the PEM certificates of a CA file; the errors are
// *FileError naming name.
func LoadPool(name, path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{name, path, "must be a readable PEM file", err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &FileError{name, path, "must hold PEM certificates", errors.New("no certificate found")}
	}
	return pool, nil
}

// Package s3server starts an S3-protocol server on loopback for tests:
// gofakes3 in memory, one bucket with versioning on, reached by the
// product through its real s3blob driver (PROGRESSDB_ATTACHMENTS_URL).
package s3server

import (
	"io"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Bucket is the one bucket a Server holds.
const Bucket = "chat-files"

// Server is an S3-protocol server with versioning on.
type Server struct {
	Backend *s3mem.Backend
	// URL is the attachments URL of its bucket, for the s3blob driver.
	URL string
	// Env is what a process started by the test needs to reach it with
	// the AWS SDK's usual credentials (the server checks no signature);
	// Start sets the same in the test's own environment.
	Env []string
	srv *httptest.Server
}

// Start starts a server that stops when the test ends. It sets the AWS
// SDK's environment for the test (t.Setenv: not for parallel tests).
func Start(t *testing.T) *Server {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(Bucket); err != nil {
		t.Fatal(err)
	}
	var v gofakes3.VersioningConfiguration
	v.SetEnabled(true)
	if err := backend.SetVersioningConfiguration(Bucket, v); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	none := filepath.Join(t.TempDir(), "none")
	env := []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_CONFIG_FILE=" + none,
		"AWS_SHARED_CREDENTIALS_FILE=" + none}
	for _, kv := range env {
		for i := range kv {
			if kv[i] == '=' {
				t.Setenv(kv[:i], kv[i+1:])
				break
			}
		}
	}
	return &Server{Backend: backend, Env: env, srv: srv,
		URL: "s3://" + Bucket + "?region=us-east-1&use_path_style=true&endpoint=" + srv.URL}
}

// Close stops the server now (a store that cannot be reached).
func (s *Server) Close() { s.srv.Close() }

// Versions returns the bytes of every stored version (delete markers
// left out) of every object under prefix, by "key@version".
func (s *Server) Versions(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	res, err := s.Backend.ListBucketVersions(Bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, item := range res.Versions {
		v, ok := item.(*gofakes3.Version)
		if !ok {
			continue // a delete marker
		}
		obj, err := s.Backend.GetObjectVersion(Bucket, v.Key, v.VersionID, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj.Contents)
		_ = obj.Contents.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[v.Key+"@"+string(v.VersionID)] = b
	}
	return out
}

package app

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/progressdb/progressdb/internal/testcerts"
	"github.com/progressdb/progressdb/server/internal/cluster"
	"github.com/progressdb/progressdb/server/internal/cluster/etcdtest"
	"github.com/progressdb/progressdb/server/internal/router"
	"github.com/progressdb/progressdb/server/pkg/config"
)

// tlsClient is an HTTP client over TLS with cfg, HTTP/2 when the server
// offers it.
func tlsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, Proxy: nil}}
}

// serveTLS runs a single node on env until the test ends and waits until
// it answers /healthz over TLS with c.
func serveTLS(t *testing.T, c *http.Client, env ...string) string {
	t.Helper()
	addr := freeAddr(t)
	cfg, err := config.Load(append([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(t.TempDir(), "data"),
		"PROGRESSDB_ADDR=" + addr, "PROGRESSDB_ADMIN_TOKEN=" + testAdminToken}, env...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, testLogger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitTLS(t, c, "https://"+addr)
	return addr
}

// waitTLS waits until base answers /healthz through c.
func waitTLS(t *testing.T, c *http.Client, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer over TLS: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendTLS makes one request through c and returns the status and body.
func sendTLS(t *testing.T, c *http.Client, method, url, body string, h http.Header) (int, []byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp
}

// codeOf is the code of an error answer.
func codeOf(b []byte) string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return e.Code
}

// A server with a certificate serves HTTPS only, TLS 1.2 at least, HTTP/2
// to a client that offers it. A plain-HTTP request to its port gets no
// data: the thread it asks for is not in the answer. The admin routes
// need a client certificate of the client CA besides the token (none, or
// one of another CA, is refused); /v1 needs none. The certificate's
// expiry is a metric.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, clientCA, otherCA := testcerts.NewCA(t, "server CA"), testcerts.NewCA(t, "client CA"), testcerts.NewCA(t, "other CA")
	serverLeaf := ca.Issue(t, "server", testcerts.Options{Server: true})
	certFile, keyFile := serverLeaf.Write(t, dir, "server")
	plain := tlsClient(testcerts.ClientConfig(ca.Pool()))
	addr := serveTLS(t, plain, "PROGRESSDB_TLS_CERT_FILE="+certFile, "PROGRESSDB_TLS_KEY_FILE="+keyFile,
		"PROGRESSDB_TLS_CLIENT_CA_FILE="+clientCA.WriteCA(t, dir, "client-ca.pem"))
	base := "https://" + addr

	code, b, resp := sendTLS(t, plain, "POST", base+"/v1/threads", `{"id":"secret-thread","title":"the launch date","author":"a"}`, nil)
	if code != http.StatusCreated {
		t.Fatalf("create over TLS: %d %s", code, b)
	}
	if resp.ProtoMajor != 2 || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("answered over %s, TLS version %x: want HTTP/2 over TLS 1.2 or later", resp.Proto, resp.TLS.Version)
	}

	// Plain HTTP on the TLS port: no data.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /v1/threads/secret-thread HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(bufio.NewReader(conn))
	conn.Close()
	if strings.Contains(string(answer), "launch date") || strings.Contains(string(answer), "200 OK") {
		t.Fatalf("a plain-HTTP request got data: %q", answer)
	}

	// TLS 1.1 is refused.
	old := testcerts.ClientConfig(ca.Pool())
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := tlsClient(old).Get(base + "/healthz"); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}

	// Admin routes: the token and a client certificate of the client CA.
	auth := http.Header{"Authorization": {"Bearer " + testAdminToken}}
	for name, c := range map[string]*http.Client{
		"no certificate":         plain,
		"another CA's":           tlsClient(testcerts.ClientConfig(ca.Pool(), otherCA.Issue(t, "op", testcerts.Options{Client: true}).TLS(t))),
		"an expired certificate": tlsClient(testcerts.ClientConfig(ca.Pool(), clientCA.Issue(t, "op", testcerts.Options{Client: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}).TLS(t))),
	} {
		code, b, resp := sendTLS(t, c, "GET", base+"/admin/threads/secret-thread", "", auth)
		if code != http.StatusUnauthorized || codeOf(b) != "unauthorized" || strings.Contains(string(b), "launch date") {
			t.Errorf("admin call with %s: %d %s", name, code, b)
		}
		// Refused before the API, the answer still carries a request ID
		// (spec §7): the client's own when it sent one.
		if resp.Header.Get("X-Request-ID") == "" {
			t.Errorf("admin call with %s: refused without an X-Request-ID", name)
		}
		withID := http.Header{"Authorization": auth["Authorization"], "X-Request-Id": {"client-chosen-id.42"}}
		if _, _, resp := sendTLS(t, c, "GET", base+"/admin/threads/secret-thread", "", withID); resp.Header.Get("X-Request-ID") != withID.Get("X-Request-ID") {
			t.Errorf("admin call with %s: X-Request-ID %q, want the client's %q", name, resp.Header.Get("X-Request-ID"), withID.Get("X-Request-ID"))
		}
	}
	op := tlsClient(testcerts.ClientConfig(ca.Pool(), clientCA.Issue(t, "operator", testcerts.Options{Client: true}).TLS(t)))
	if code, b, _ := sendTLS(t, op, "GET", base+"/admin/threads/secret-thread", "", auth); code != http.StatusOK {
		t.Fatalf("admin call with the client CA's certificate: %d %s", code, b)
	}
	if code, b, _ := sendTLS(t, op, "GET", base+"/admin/threads/secret-thread", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("admin call with a certificate and no token: %d %s", code, b)
	}
	if code, b, _ := sendTLS(t, plain, "GET", base+"/v1/threads/secret-thread", "", nil); code != http.StatusOK {
		t.Fatalf("/v1 without a client certificate: %d %s", code, b)
	}

	_, metrics, _ := sendTLS(t, plain, "GET", base+"/metrics", "", nil)
	want := fmt.Sprintf(`progressdb_tls_cert_expiry_timestamp_seconds{cert="server"} %g`, float64(serverLeaf.Cert.NotAfter.Unix()))
	if !strings.Contains(string(metrics), want) {
		t.Fatalf("metrics lack %s", want)
	}
}

// Serve refuses, naming the setting (exit 2), certificate files it cannot
// use: a key that is not the certificate's, a CA file without a
// certificate, and a cluster certificate that does not name the node's
// advertise host or that the cluster CA did not sign.
func TestValidateRefusesUnusableTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, "cluster CA"), testcerts.NewCA(t, "other CA")
	certFile, keyFile := ca.Issue(t, "a", testcerts.Options{}).Write(t, dir, "a")
	_, otherKey := ca.Issue(t, "b", testcerts.Options{}).Write(t, dir, "b")
	elsewhereCert, elsewhereKey := ca.Issue(t, "c", testcerts.Options{Hosts: []string{"node-9.example"}}).Write(t, dir, "c")
	strangerCert, strangerKey := other.Issue(t, "d", testcerts.Options{}).Write(t, dir, "d")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	node := func(cert, key string) []string {
		return []string{"PROGRESSDB_CLUSTER_ETCD=http://127.0.0.1:1", "PROGRESSDB_NODE_ID=n1",
			"PROGRESSDB_ADVERTISE_URL=https://127.0.0.1:8080", "PROGRESSDB_CLUSTER_SECRET=" + testSecret,
			"PROGRESSDB_CLUSTER_TLS_CA_FILE=" + caFile, "PROGRESSDB_CLUSTER_TLS_CERT_FILE=" + cert, "PROGRESSDB_CLUSTER_TLS_KEY_FILE=" + key}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"PROGRESSDB_TLS_CERT_FILE=" + certFile, "PROGRESSDB_TLS_KEY_FILE=" + otherKey}, config.VarTLSKey},
		{[]string{"PROGRESSDB_TLS_CERT_FILE=" + keyFile, "PROGRESSDB_TLS_KEY_FILE=" + keyFile}, config.VarTLSCert},
		{[]string{"PROGRESSDB_TLS_CERT_FILE=" + certFile, "PROGRESSDB_TLS_KEY_FILE=" + keyFile, "PROGRESSDB_TLS_CLIENT_CA_FILE=" + keyFile}, config.VarTLSClientCA},
		{node(elsewhereCert, elsewhereKey), config.VarClusterTLSCert},
		{node(strangerCert, strangerKey), config.VarClusterTLSCert},
		{append(node(certFile, keyFile), "PROGRESSDB_CLUSTER_TLS_CA_FILE="+certFile+".missing"), config.VarClusterTLSCA},
	} {
		env := append([]string{"PROGRESSDB_DB_PATH=" + filepath.Join(t.TempDir(), "data")}, c.env...)
		cfg, err := config.Load(env)
		if err == nil {
			err = Check(cfg)
		}
		var se *StartupError
		var ce *config.Error
		switch {
		case errors.As(err, &se) && se.Var == c.want:
		case errors.As(err, &ce) && ce.Var == c.want:
		default:
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.want)
		}
	}
}

// tlsNode is a cluster node served in the test process with mutual TLS
// between the nodes.
type tlsNode struct {
	*testNode
	certFile, keyFile string
}

func (n *tlsNode) url() string { return "https://" + n.addr }

// startTLSCluster starts nodes ids over one etcd, each with a certificate
// of ca naming 127.0.0.1, and waits until every shard is owned.
func startTLSCluster(t *testing.T, ca *testcerts.CA, extra []string, ids ...string) []*tlsNode {
	t.Helper()
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cluster.CreateCluster(ctx, etcd.Client(t), cluster.Keys{Name: "chat"}, testShards, ids); err != nil {
		t.Fatal(err)
	}
	caFile := ca.WriteCA(t, t.TempDir(), "cluster-ca.pem")
	c := tlsClient(testcerts.ClientConfig(ca.Pool()))
	var nodes []*tlsNode
	for _, id := range ids {
		dir := t.TempDir()
		n := &tlsNode{testNode: &testNode{id: id, addr: freeAddr(t), dir: dir, done: make(chan error, 1)}}
		n.certFile, n.keyFile = ca.Issue(t, id, testcerts.Options{}).Write(t, dir, id)
		cfg, err := config.Load(append([]string{
			"PROGRESSDB_DB_PATH=" + filepath.Join(dir, "data"),
			"PROGRESSDB_ADDR=" + n.addr,
			"PROGRESSDB_ADMIN_TOKEN=" + testAdminToken,
			"PROGRESSDB_CLUSTER_ETCD=" + strings.Join(etcd.Endpoints(), ","),
			"PROGRESSDB_CLUSTER_NAME=chat",
			"PROGRESSDB_NODE_ID=" + id,
			"PROGRESSDB_ADVERTISE_URL=" + n.url(),
			"PROGRESSDB_CLUSTER_SECRET=" + testSecret,
			fmt.Sprintf("PROGRESSDB_CLUSTER_SHARDS=%d", testShards),
			"PROGRESSDB_CLUSTER_LEASE_TTL=3s",
			"PROGRESSDB_CLUSTER_TLS_CA_FILE=" + caFile,
			"PROGRESSDB_CLUSTER_TLS_CERT_FILE=" + n.certFile,
			"PROGRESSDB_CLUSTER_TLS_KEY_FILE=" + n.keyFile,
		}, extra...))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.stop = cancel
		go func() { n.done <- Serve(ctx, cfg, testLogger(t)) }()
		t.Cleanup(n.shutdown)
		waitTLS(t, c, n.url())
		nodes = append(nodes, n)
	}
	waitOwned(t, etcd, testShards)
	return nodes
}

// With mutual TLS between the nodes, a node forwards over TLS with its
// certificate and the owner serves the call. A call with the node headers
// and the cluster secret but without a valid node certificate (none, one
// of another CA, an expired one, one naming another host than the calling
// node's advertise host) is refused before any handler runs: the thread it
// would create does not exist afterwards, and a move step is not taken.
func TestClusterMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "cluster CA")
	nodes := startTLSCluster(t, ca, nil, "node-a", "node-b")
	a, b := nodes[0], nodes[1]
	client := tlsClient(testcerts.ClientConfig(ca.Pool()))

	// Shard 1 is node-b's: written and read back through node-a.
	tb := threadIn(t, 1)
	if code, body, _ := sendTLS(t, client, "POST", a.url()+"/v1/threads", `{"id":"`+tb+`","title":"t","author":"x"}`, nil); code != http.StatusCreated {
		t.Fatalf("create through node-a: %d %s", code, body)
	}
	if code, body, _ := sendTLS(t, client, "GET", a.url()+"/v1/threads/"+tb, "", nil); code != http.StatusOK {
		t.Fatalf("read through node-a: %d %s", code, body)
	}

	posing := http.Header{router.HeaderSecret: {testSecret}, router.HeaderNode: {"node-a"}}
	expired := testcerts.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}
	for i, c := range []struct {
		name string
		cert []tls.Certificate
	}{
		{"no certificate", nil},
		{"another CA's", []tls.Certificate{testcerts.NewCA(t, "other CA").Issue(t, "node-a", testcerts.Options{}).TLS(t)}},
		{"an expired one", []tls.Certificate{ca.Issue(t, "node-a", expired).TLS(t)}},
		{"one naming another host", []tls.Certificate{ca.Issue(t, "node-a", testcerts.Options{Hosts: []string{"node-9.example"}}).TLS(t)}},
	} {
		caller := tlsClient(testcerts.ClientConfig(ca.Pool(), c.cert...))
		tid := ""
		for k := i * 1000; tid == "" || cluster.ShardOf(tid, testShards) != 1; k++ {
			tid = fmt.Sprintf("posed%d", k)
		}
		code, body, _ := sendTLS(t, caller, "POST", b.url()+"/v1/threads", `{"id":"`+tid+`","title":"t","author":"x"}`, posing)
		if code != http.StatusForbidden || codeOf(body) != "not_a_node" {
			t.Errorf("a node call with %s: %d %s, want 403 not_a_node", c.name, code, body)
		}
		if code, body, _ := sendTLS(t, client, "GET", b.url()+"/v1/threads/"+tid, "", nil); code != http.StatusNotFound {
			t.Errorf("after the refused call with %s, the thread: %d %s", c.name, code, body)
		}
		code, body, _ = sendTLS(t, caller, "POST", b.url()+router.MoveStepsPath+"1/fence?fence=1", "", posing)
		if code != http.StatusForbidden || codeOf(body) != "not_a_node" {
			t.Errorf("a move step with %s: %d %s, want 403 not_a_node", c.name, code, body)
		}
	}
	// The same call with node-a's own certificate passes the check and
	// reaches the router, which asks a node's call for the shard's epoch.
	own := tlsClient(testcerts.ClientConfig(ca.Pool(), ca.Issue(t, "node-a", testcerts.Options{}).TLS(t)))
	code, body, _ := sendTLS(t, own, "GET", b.url()+"/v1/threads/"+tb, "", posing)
	if code != http.StatusMisdirectedRequest || codeOf(body) != "misdirected" {
		t.Fatalf("a node call with node-a's certificate: %d %s, want the router's 421 for a call without the epoch", code, body)
	}
}

// On a cluster with client certificates for the admin routes, a client's
// admin call with one is served through any node: the node that forwards
// it to the shard's owner is checked as a node, the client by the node it
// asked. Without one it is refused at the node it asked.
func TestClusterAdminCallsWithClientCertificates(t *testing.T) {
	t.Parallel()
	ca, clientCA := testcerts.NewCA(t, "cluster CA"), testcerts.NewCA(t, "client CA")
	nodes := startTLSCluster(t, ca, []string{"PROGRESSDB_TLS_CLIENT_CA_FILE=" + clientCA.WriteCA(t, t.TempDir(), "client-ca.pem")},
		"node-a", "node-b")
	a := nodes[0]
	plain := tlsClient(testcerts.ClientConfig(ca.Pool()))
	op := tlsClient(testcerts.ClientConfig(ca.Pool(), clientCA.Issue(t, "operator", testcerts.Options{Client: true}).TLS(t)))
	tb := threadIn(t, 1) // node-b's
	if code, body, _ := sendTLS(t, plain, "POST", a.url()+"/v1/threads", `{"id":"`+tb+`","title":"t","author":"x"}`, nil); code != http.StatusCreated {
		t.Fatalf("create through node-a: %d %s", code, body)
	}
	auth := http.Header{"Authorization": {"Bearer " + testAdminToken}}
	if code, body, _ := sendTLS(t, op, "GET", a.url()+"/admin/threads/"+tb, "", auth); code != http.StatusOK {
		t.Fatalf("an admin call with the client CA's certificate, forwarded to node-b: %d %s", code, body)
	}
	if code, body, _ := sendTLS(t, plain, "GET", a.url()+"/admin/threads/"+tb, "", auth); code != http.StatusUnauthorized {
		t.Fatalf("an admin call without a client certificate: %d %s", code, body)
	}
}

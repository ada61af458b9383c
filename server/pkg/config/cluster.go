package config

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Cluster is the PROGRESSDB_CLUSTER_* group (spec §11). Without Etcd the
// server is a single node and ignores the rest. (Field names are unique
// across groups: they map to variables.)
type Cluster struct {
	// Etcd is the comma-separated etcd client URLs; empty: single node.
	Etcd string `env:"ETCD"`
	// ClusterName prefixes every etcd key, so clusters can share an etcd.
	ClusterName string `env:"NAME" envDefault:"progressdb"`
	// Secret authenticates node-to-node requests.
	Secret string `env:"SECRET"` // secret
	// SecretFile names a file that holds the secret instead (secrets.go).
	SecretFile string `env:"SECRET_FILE"`
	// Shards is fixed when the cluster is first created.
	Shards int `env:"SHARDS" envDefault:"16"`
	// OwnerTTL is the shard-ownership lease's lifetime (renewed every TTL/3).
	OwnerTTL time.Duration `env:"LEASE_TTL" envDefault:"10s"`
	// DeadAfter is how long a node stays unregistered before its replicas
	// of replicated shards are re-created on other nodes (spec §15).
	DeadAfter time.Duration `env:"DEAD_AFTER" envDefault:"5m"`
	// TLS files for etcd: a CA to check its certificate, and a client
	// certificate and key when etcd asks for one.
	EtcdCA   string `env:"ETCD_CA_FILE"`
	EtcdCert string `env:"ETCD_CERT_FILE"`
	EtcdKey  string `env:"ETCD_KEY_FILE"`
	// Mutual TLS between the nodes (spec §14): the cluster CA that signs
	// every node's certificate, and this node's certificate and key.
	TLSCA   string `env:"TLS_CA_FILE"`
	TLSCert string `env:"TLS_CERT_FILE"`
	TLSKey  string `env:"TLS_KEY_FILE"`
}

// Cluster variables.
const (
	VarClusterEtcd      = "PROGRESSDB_CLUSTER_ETCD"
	VarClusterName      = "PROGRESSDB_CLUSTER_NAME"
	VarNodeID           = "PROGRESSDB_NODE_ID"
	VarAdvertiseURL     = "PROGRESSDB_ADVERTISE_URL"
	VarClusterSecret    = "PROGRESSDB_CLUSTER_SECRET"
	VarClusterShards    = "PROGRESSDB_CLUSTER_SHARDS"
	VarClusterLeaseTTL  = "PROGRESSDB_CLUSTER_LEASE_TTL"
	VarClusterDeadAfter = "PROGRESSDB_CLUSTER_DEAD_AFTER"
	VarClusterEtcdCA    = "PROGRESSDB_CLUSTER_ETCD_CA_FILE"
	VarClusterEtcdCert  = "PROGRESSDB_CLUSTER_ETCD_CERT_FILE"
	VarClusterEtcdKey   = "PROGRESSDB_CLUSTER_ETCD_KEY_FILE"
	VarClusterTLSCA     = "PROGRESSDB_CLUSTER_TLS_CA_FILE"
	VarClusterTLSCert   = "PROGRESSDB_CLUSTER_TLS_CERT_FILE"
	VarClusterTLSKey    = "PROGRESSDB_CLUSTER_TLS_KEY_FILE"
)

// Limits of the cluster settings.
const (
	// MaxShards bounds PROGRESSDB_CLUSTER_SHARDS: every shard is a Pebble
	// database with its own memtables, files and audit chain.
	MaxShards         = 1024
	minClusterSecret  = 16
	minOwnerTTL       = 3 * time.Second // etcd counts whole seconds; renewed every TTL/3
	maxOwnerTTL       = 5 * time.Minute // a dead owner's shards wait this long
	minDeadAfter      = time.Second     // tests; a node restarting takes longer
	maxDeadAfter      = 7 * 24 * time.Hour
	maxClusterNameLen = 64
)

var (
	clusterNameRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	nodeIDRule      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// Enabled reports whether the server runs as a cluster node.
func (c Cluster) Enabled() bool { return c.Etcd != "" }

// ValidNodeID reports whether id is a valid PROGRESSDB_NODE_ID.
func ValidNodeID(id string) bool { return nodeIDRule.MatchString(id) }

// Endpoints returns the etcd client URLs.
func (c Cluster) Endpoints() []string {
	var out []string
	for _, e := range strings.Split(c.Etcd, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// validateCluster checks the cluster settings when PROGRESSDB_CLUSTER_ETCD
// is set; a single node ignores them. Unless node is set, the settings
// that only a node needs are not required.
func (c Config) validateCluster(vars map[string]string, node bool) *Error {
	cl := c.Cluster
	if !cl.Enabled() {
		return nil
	}
	for _, e := range strings.Split(cl.Etcd, ",") {
		if !isHTTPURL(strings.TrimSpace(e)) {
			return &Error{VarClusterEtcd, cl.Etcd, "must be comma-separated etcd client URLs such as http://10.0.0.5:2379,http://10.0.0.6:2379"}
		}
	}
	if !clusterNameRule.MatchString(cl.ClusterName) || len(cl.ClusterName) > maxClusterNameLen {
		return &Error{VarClusterName, cl.ClusterName, "must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (it prefixes every etcd key)"}
	}
	if err := c.validateNode(node); err != nil {
		return err
	}
	if cl.Shards < 1 || cl.Shards > MaxShards {
		return &Error{VarClusterShards, shown(vars, VarClusterShards, strconv.Itoa(cl.Shards)), "must be from 1 to 1024"}
	}
	if cl.OwnerTTL < minOwnerTTL || cl.OwnerTTL > maxOwnerTTL || cl.OwnerTTL%time.Second != 0 {
		return &Error{VarClusterLeaseTTL, shown(vars, VarClusterLeaseTTL, FormatDuration(cl.OwnerTTL)),
			"must be whole seconds from 3s to 5m (etcd counts leases in seconds; a dead node's shards wait this long)"}
	}
	if cl.DeadAfter < minDeadAfter || cl.DeadAfter > maxDeadAfter {
		return &Error{VarClusterDeadAfter, shown(vars, VarClusterDeadAfter, FormatDuration(cl.DeadAfter)),
			"must be from 1s to 168h (a node unregistered this long has its replicas re-created on other nodes)"}
	}
	if (cl.EtcdCert == "") != (cl.EtcdKey == "") {
		name, value := VarClusterEtcdKey, cl.EtcdKey
		if cl.EtcdCert == "" {
			name, value = VarClusterEtcdCert, cl.EtcdCert
		}
		return &Error{name, value, "the etcd client certificate and key go together: set both " +
			VarClusterEtcdCert + " and " + VarClusterEtcdKey + " or neither"}
	}
	if err := checkFiles([]file{
		{VarClusterEtcdCA, cl.EtcdCA}, {VarClusterEtcdCert, cl.EtcdCert}, {VarClusterEtcdKey, cl.EtcdKey},
	}); err != nil {
		return err
	}
	return c.validateClusterTLS(node)
}

// validateNode checks the settings that name a cluster node, when node
// is set: its ID, its URL and the secret of node-to-node requests.
func (c Config) validateNode(node bool) *Error {
	if !node {
		return nil
	}
	if !nodeIDRule.MatchString(c.NodeID) {
		return &Error{VarNodeID, c.NodeID, "is required in a cluster: a stable name of 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"}
	}
	if !isHTTPURL(c.AdvertiseURL) {
		return &Error{VarAdvertiseURL, c.AdvertiseURL, "is required in a cluster: the http:// or https:// URL at which the other nodes reach this one, such as http://10.0.0.7:8080"}
	}
	secret := c.Cluster.Secret
	if len(secret) < minClusterSecret || strings.TrimSpace(secret) != secret ||
		strings.IndexFunc(secret, unicode.IsControl) >= 0 {
		shown := "<redacted>"
		if secret == "" {
			shown = ""
		}
		return &Error{VarClusterSecret, shown, "is required in a cluster: at least 16 characters, no control characters, no space at either end; node-to-node requests carry it"}
	}
	return nil
}

// isHTTPURL reports whether s is an absolute http or https URL with a host.
func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.User == nil && u.RawQuery == "" && u.Fragment == ""
}

// redactedCluster lists the cluster settings for Redacted.
func (c Config) redactedCluster() [][2]string {
	cl := c.Cluster
	return [][2]string{
		{VarClusterEtcd, unsetIfEmpty(cl.Etcd)},
		{VarClusterName, cl.ClusterName},
		{VarNodeID, unsetIfEmpty(c.NodeID)},
		{VarAdvertiseURL, unsetIfEmpty(c.AdvertiseURL)},
		{VarClusterSecret, secret(cl.Secret)},
		{VarClusterSecretFile, unsetIfEmpty(cl.SecretFile)},
		{VarClusterShards, strconv.Itoa(cl.Shards)},
		{VarClusterLeaseTTL, FormatDuration(cl.OwnerTTL)},
		{VarClusterDeadAfter, FormatDuration(cl.DeadAfter)},
		{VarClusterEtcdCA, unsetIfEmpty(cl.EtcdCA)},
		{VarClusterEtcdCert, unsetIfEmpty(cl.EtcdCert)},
		{VarClusterEtcdKey, unsetIfEmpty(cl.EtcdKey)},
		{VarClusterTLSCA, unsetIfEmpty(cl.TLSCA)},
		{VarClusterTLSCert, unsetIfEmpty(cl.TLSCert)},
		{VarClusterTLSKey, unsetIfEmpty(cl.TLSKey)},
	}
}

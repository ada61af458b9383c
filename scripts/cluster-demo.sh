#!/usr/bin/env bash
# Starts an etcd and three progressdb nodes on loopback, creates the
# cluster, writes threads through one node and reads them back through the
# others, then shows the cluster's status. Everything runs in a temporary
# folder and is stopped and removed at the end.
#
#   scripts/cluster-demo.sh [PROGRESSDB_BIN] [DEV_ETCD_BIN]
#
# Ports: CLUSTER_DEMO_PORT (default 18080) and the next three for the
# nodes, CLUSTER_DEMO_ETCD_PORT (default 23790) and the next one for etcd.
# CLUSTER_DEMO_TLS=1 makes a CA and a certificate per node with openssl
# (docs/tls.md) and runs the nodes with mutual TLS between them: they serve
# HTTPS only and the demo's requests check their certificates.
# CLUSTER_DEMO_SEALED=1 gives every node the same KEK (a local key made by
# progressdb keys generate-kek) and a key store folder: every shard's
# content is sealed at rest (docs/encryption.md, Cluster).
# CLUSTER_DEMO_REPLICAS=3 creates the cluster with three replicas of each
# shard (docs/cluster.md, Replicated shards): stopping a node then leaves
# every thread readable and writable through the others.
set -euo pipefail
bin=${1:-./bin/progressdb}
etcd_bin=${2:-./bin/progressdb-dev-etcd}
base=${CLUSTER_DEMO_PORT:-18080}
etcd_port=${CLUSTER_DEMO_ETCD_PORT:-23790}
replicas=${CLUSTER_DEMO_REPLICAS:-1}
if [ "$replicas" != 1 ] && [ -n "${CLUSTER_DEMO_SEALED:-}" ]; then
	echo "cluster-demo: CLUSTER_DEMO_SEALED with CLUSTER_DEMO_REPLICAS: sealing replicated shards is not built yet" >&2
	exit 2
fi
dir=$(mktemp -d -t progressdb-cluster-demo.XXXXXX)
pids=()
cleanup() {
	# Stop what this script started, by process ID, then remove the folder.
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
fail() { echo "cluster-demo: $*" >&2; exit 1; }

# wait_for CMD...: retries CMD for up to a minute (a guard against a hang).
wait_for() {
	for _ in $(seq 600); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	return 1
}

step "etcd on 127.0.0.1:$etcd_port (progressdb-dev-etcd: one member, loopback only)"
"$etcd_bin" --dir "$dir/etcd" --listen "127.0.0.1:$etcd_port" --peer "127.0.0.1:$((etcd_port + 1))" >"$dir/etcd.log" 2>&1 &
pids+=($!)
wait_for grep -q 'etcd ready' "$dir/etcd.log" || { cat "$dir/etcd.log" >&2; fail "etcd did not start"; }
cat "$dir/etcd.log"

export PROGRESSDB_CLUSTER_ETCD="http://127.0.0.1:$etcd_port"
export PROGRESSDB_CLUSTER_NAME=demo
export PROGRESSDB_CLUSTER_SECRET=cluster-demo-secret-0123456789
export PROGRESSDB_CLUSTER_SHARDS=6
export PROGRESSDB_CLUSTER_LEASE_TTL=5s
export PROGRESSDB_ADMIN_TOKEN=demo-admin-token
export PROGRESSDB_LOG_LEVEL=warn

scheme=http
if [ -n "${CLUSTER_DEMO_TLS:-}" ]; then
	scheme=https
	step "a cluster CA and a certificate per node naming 127.0.0.1 (openssl; docs/tls.md)"
	mkdir -p "$dir/tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=cluster-demo CA" \
		-keyout "$dir/tls/ca.key" -out "$dir/tls/ca.crt" 2>/dev/null
	for i in 1 2 3; do
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=node-$i" \
			-keyout "$dir/tls/node-$i.key" -out "$dir/tls/node-$i.csr" 2>/dev/null
		openssl x509 -req -in "$dir/tls/node-$i.csr" -CA "$dir/tls/ca.crt" -CAkey "$dir/tls/ca.key" -CAcreateserial -days 1 \
			-extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n') \
			-out "$dir/tls/node-$i.crt" 2>/dev/null
		echo "node-$i: $(openssl x509 -in "$dir/tls/node-$i.crt" -noout -subject -ext subjectAltName | tr '\n' ' ')"
	done
	# Every node trusts the cluster CA; the command line verifies the
	# nodes with it too (PROGRESSDB_TLS_CA_FILE), and so does curl.
	export PROGRESSDB_CLUSTER_TLS_CA_FILE="$dir/tls/ca.crt"
	curl() { command curl --cacert "$dir/tls/ca.crt" "$@"; }
fi

if [ -n "${CLUSTER_DEMO_SEALED:-}" ]; then
	step "one KEK for every node (progressdb keys generate-kek); each node keeps a key store per shard"
	"$bin" keys generate-kek --out "$dir/kek"
	export PROGRESSDB_KEK_FILE="$dir/kek"
fi

# node_env I: the environment of node I.
node_env() {
	local i=$1 port=$((base + $1))
	echo "PROGRESSDB_NODE_ID=node-$i PROGRESSDB_ADDR=127.0.0.1:$port PROGRESSDB_ADVERTISE_URL=$scheme://127.0.0.1:$port PROGRESSDB_DB_PATH=$dir/node-$i/data PROGRESSDB_RETENTION_AUDIT_PATH=$dir/node-$i/audit"
	if [ -n "${CLUSTER_DEMO_SEALED:-}" ]; then
		echo "PROGRESSDB_KEYSTORE_PATH=$dir/node-$i/keys"
	fi
	if [ "$scheme" = https ]; then
		echo "PROGRESSDB_CLUSTER_TLS_CERT_FILE=$dir/tls/node-$i.crt PROGRESSDB_CLUSTER_TLS_KEY_FILE=$dir/tls/node-$i.key"
	fi
}
url() { echo "$scheme://127.0.0.1:$((base + $1))"; }

step "three nodes on $(url 1), $(url 2), $(url 3) (each reports what it holds, then waits for the cluster)"
for i in 1 2 3; do
	mkdir -p "$dir/node-$i"
	env $(node_env "$i") "$bin" serve >"$dir/node-$i/log" 2>&1 &
	pids+=($!)
done

step "progressdb cluster create --nodes node-1,node-2,node-3 --replicas $replicas (6 shards)"
env $(node_env 1) "$bin" cluster create --nodes node-1,node-2,node-3 --replicas "$replicas" --wait 1m
for i in 1 2 3; do
	wait_for curl -fsS "$(url "$i")/healthz" || { cat "$dir/node-$i/log" >&2; fail "node-$i did not start"; }
	echo "node-$i: $(curl -fsS "$(url "$i")/healthz")"
done
# leaders: true once node-1 sees a leader of every shard's group.
leaders() { curl -fsS "$(url 1)/metrics" | grep -q '^progressdb_cluster_shards_unowned 0$'; }
if [ "$replicas" != 1 ]; then
	wait_for leaders || fail "no leader of every shard's group"
	echo "every shard's group has elected a leader (progressdb_cluster_shards_unowned 0 on node-1)"
fi

step "write six threads, a message each, all through node-1"
for t in alpha bravo charlie delta echo foxtrot; do
	curl -fsS -X POST "$(url 1)/v1/threads" -d "{\"id\":\"$t\",\"title\":\"thread $t\",\"author\":\"ann\"}" >/dev/null ||
		fail "create $t through node-1"
	curl -fsS -X POST "$(url 1)/v1/threads/$t/messages" -d "{\"author\":\"ann\",\"body\":{\"text\":\"hello from $t\"}}" >/dev/null ||
		fail "append to $t through node-1"
	echo "wrote $t"
done

step "read every message back through node-2 and node-3"
for i in 2 3; do
	for t in alpha bravo charlie delta echo foxtrot; do
		body=$(curl -fsS "$(url "$i")/v1/threads/$t/messages") || fail "read $t through node-$i"
		grep -q "hello from $t" <<<"$body" || fail "node-$i did not return the message of $t: $body"
	done
	echo "node-$i: all six messages read back"
done

if [ -n "${CLUSTER_DEMO_SEALED:-}" ]; then
	step "sealed at rest: no title or body in any file of any node's data or key store folders"
	for i in 1 2 3; do
		ls -d "$dir/node-$i"/keys/shards/* | sed "s|$dir/||"
		if grep -rqa -e 'hello from' -e 'thread alpha' "$dir/node-$i/data" "$dir/node-$i/keys"; then
			fail "node-$i holds content in clear"
		fi
	done
	echo "no 'hello from' or 'thread alpha' in any file of node-1, node-2 or node-3"
fi

step "GET /v1/threads through node-3 (every shard's page merged in ID order)"
curl -fsS "$(url 3)/v1/threads?limit=10" | tr ',' '\n' | grep -o '"id":"[^"]*"' | tr '\n' ' '
echo

step "progressdb cluster status (read from etcd)"
env $(node_env 1) "$bin" cluster status

if [ "$replicas" != 1 ]; then
	step "stop node-3: every shard keeps two of its three replicas, a majority"
	node3=${pids[3]}
	kill "$node3"
	wait "$node3" 2>/dev/null || true
	# A shard node-3 led answers 503 with Retry-After until its group
	# elects another leader (2-4 s); the writes are sent again with their
	# Idempotency-Key, so each is made once.
	for t in alpha bravo charlie delta echo foxtrot; do
		wait_for curl -fsS -X POST -H "Idempotency-Key: demo-$t" "$(url 1)/v1/threads/$t/messages" \
			-d "{\"author\":\"ann\",\"body\":{\"text\":\"after node-3 stopped: $t\"}}" || fail "append to $t with node-3 down"
	done
	for t in alpha bravo charlie delta echo foxtrot; do
		body=$(curl -fsS "$(url 2)/v1/threads/$t/messages") || fail "read $t through node-2 with node-3 down"
		grep -q "after node-3 stopped: $t" <<<"$body" || fail "node-2 did not return the new message of $t: $body"
	done
	echo "with node-3 down: a message written to each of the six threads through node-1, all read back through node-2"

	step "start node-3 again on its data: its replicas catch up from their leaders' logs"
	env $(node_env 3) "$bin" serve >>"$dir/node-3/log" 2>&1 &
	pids+=($!)
	wait_for curl -fsS "$(url 3)/healthz" || { cat "$dir/node-3/log" >&2; fail "node-3 did not start again"; }
	for t in alpha bravo charlie delta echo foxtrot; do
		wait_for grep -q "after node-3 stopped" <(curl -fsS "$(url 3)/v1/threads/$t/messages") || fail "$t not read through node-3"
	done
	echo "all six threads, with the messages written while it was down, read through node-3"
	echo
	echo "cluster-demo: ok"
	exit 0
fi

step "stop node-3: its shards have no other copy, so their threads answer 503"
node3=${pids[3]}
kill "$node3"
wait "$node3" 2>/dev/null || true
down=0
for t in alpha bravo charlie delta echo foxtrot; do
	code=$(curl -s -o "$dir/answer" -w '%{http_code}' "$(url 1)/v1/threads/$t/messages")
	echo "$t through node-1: $code $(head -c 120 "$dir/answer")"
	if [ "$code" = 503 ]; then down=$((down + 1)); fi
done
[ "$down" -gt 0 ] || fail "no thread was on node-3's shards"
code=$(curl -s -o /dev/null -w '%{http_code}' "$(url 1)/v1/threads")
echo "GET /v1/threads through node-1: $code (never a silently short listing)"
[ "$code" = 503 ] || fail "the listing answered $code with a shard down"

step "start node-3 again on its data: it takes its shards back with new epochs"
env $(node_env 3) "$bin" serve >>"$dir/node-3/log" 2>&1 &
pids+=($!)
wait_for curl -fsS "$(url 3)/healthz" || { cat "$dir/node-3/log" >&2; fail "node-3 did not start again"; }
for t in alpha bravo charlie delta echo foxtrot; do
	wait_for curl -fsS "$(url 1)/v1/threads/$t/messages" || fail "$t not readable after node-3 came back"
done
echo "all six threads read through node-1 again"

if [ "$scheme" = https ]; then
	step "mutual TLS: a call posing as a node without a node certificate is refused before any handler"
	code=$(curl -s -o "$dir/answer" -w '%{http_code}' -H "X-Progressdb-Cluster-Secret: $PROGRESSDB_CLUSTER_SECRET" \
		-H "X-Progressdb-Node: node-2" "$(url 1)/v1/threads/alpha/messages")
	echo "with the secret, without a certificate: $code $(head -c 160 "$dir/answer")"
	[ "$code" = 403 ] || fail "a call without a node certificate answered $code"
	step "progressdb retention status in node-1's environment: through node-1 over TLS, verified with the cluster CA"
	env $(node_env 1) "$bin" retention status
	code=$(command curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((base + 1))/v1/threads/alpha/messages" || true)
	echo "plain HTTP to node-1's port: $code (no data)"
	[ "$code" != 200 ] || fail "plain HTTP was answered with data"
fi

echo
echo "cluster-demo: ok"

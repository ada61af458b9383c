package app

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
)

// metricValue reads one series' value from a /metrics body (-1: absent).
func metricValue(t *testing.T, body []byte, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Each shard a node holds has its own storage and retention series, with
// a shard label: a purge in one shard counts in that shard's series only,
// and every shard's last success is kept, not whichever ran last.
func TestClusterMetricsPerShard(t *testing.T) {
	t.Parallel()
	_, nodes := startClusterWith(t, []string{"node-a", "node-b"}, "PROGRESSDB_RETENTION_MAX_MESSAGES=1")
	a := nodes[0] // shards 0 and 2
	tid := threadIn(t, 2)
	if code, body := call(t, http.MethodPost, a.url()+"/v1/threads", fmt.Sprintf(`{"id":%q,"title":"x","author":"u"}`, tid), nil); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	for range 2 {
		if code, body := call(t, http.MethodPost, a.url()+"/v1/threads/"+tid+"/messages", `{"author":"u","body":{"text":"x"}}`, nil); code != http.StatusCreated {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	if code, body := call(t, http.MethodPost, a.url()+"/admin/retention/run?wait=true", `{}`, adminAuth); code != http.StatusOK {
		t.Fatalf("retention run: %d %s", code, body)
	}
	code, body := call(t, http.MethodGet, a.url()+"/metrics", "", nil)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, s := range []string{"0", "2"} {
		for _, series := range []string{`progressdb_storage_healthy{shard="` + s + `"}`, `progressdb_retention_enabled{shard="` + s + `"}`} {
			if v := metricValue(t, body, series); v < 0 {
				t.Fatalf("no %s in node-a's metrics:\n%s", series, body)
			}
		}
		if v := metricValue(t, body, `progressdb_storage_disk_usage_bytes{shard="`+s+`"}`); v <= 0 {
			t.Fatalf("shard %s disk usage %v", s, v)
		}
		if v := metricValue(t, body, `progressdb_retention_last_success_timestamp_seconds{shard="`+s+`"}`); v <= 0 {
			t.Fatalf("shard %s last success %v", s, v)
		}
	}
	purged := func(s string) float64 {
		return metricValue(t, body, `progressdb_retention_items_purged_total{cause="max_messages",kind="message",shard="`+s+`"}`)
	}
	if purged("2") != 1 || purged("0") != 0 {
		t.Fatalf("purged messages per shard: 2: %v, 0: %v\n%s", purged("2"), purged("0"), body)
	}
	for _, absent := range []string{`shard="1"`, `shard="3"`} {
		if bytes.Contains(body, []byte(absent)) {
			t.Fatalf("node-a reports %s, which it does not hold", absent)
		}
	}
}

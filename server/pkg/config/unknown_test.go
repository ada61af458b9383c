package config

import (
	"reflect"
	"testing"
)

func TestUnknownVars(t *testing.T) {
	got := UnknownVars([]string{
		"PROGRESSDB_RETENTION_PERIODE=30d",     // typo
		"PROGRESSDB_PERIOD=7d",                 // group left out
		"PROGRESSDB_RETENTION_ADDR=:1",         // group added
		"PROGRESSDB_log_level=debug",           // wrong case: names are exact
		"PROGRESSDB_SOMETHING_ELSE_ENTIRELY=1", // nothing close
		"PROGRESSDB_RETENTION_PERIOD=30d",      // known
		"PROGRESSDB_ADMIN_TOKEN=x",             // known
		"HOME=/root",                           // not ours
	})
	want := []Unknown{
		{"PROGRESSDB_PERIOD", "PROGRESSDB_RETENTION_PERIOD"},
		{"PROGRESSDB_RETENTION_ADDR", "PROGRESSDB_ADDR"},
		{"PROGRESSDB_RETENTION_PERIODE", "PROGRESSDB_RETENTION_PERIOD"},
		{"PROGRESSDB_SOMETHING_ELSE_ENTIRELY", ""},
		{"PROGRESSDB_log_level", "PROGRESSDB_LOG_LEVEL"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownVars:\n got %v\nwant %v", got, want)
	}
}

// Every variable Config reads is known: the set comes from the struct's
// tags, so a setting added later needs no list kept by hand.
func TestEveryConfigVariableIsKnown(t *testing.T) {
	var environ []string
	n := 0
	eachVar(func(_, name string) { environ = append(environ, name+"=x"); n++ })
	for _, v := range []string{VarDBPath, VarAdminToken, VarPeriod, VarYieldToWrites} {
		found := false
		for _, kv := range environ {
			found = found || kv == v+"=x"
		}
		if !found {
			t.Errorf("%s not among Config's variables", v)
		}
	}
	if u := UnknownVars(environ); len(u) != 0 || n < 20 {
		t.Fatalf("%d variables, unknown among them: %v", n, u)
	}
}

func TestLogLevelAndFormatInAnyCase(t *testing.T) {
	c := mustLoad(t, "PROGRESSDB_LOG_LEVEL=DEBUG", "PROGRESSDB_LOG_FORMAT=Json")
	if c.LogLevel != "debug" || c.LogFormat != "json" {
		t.Fatalf("LogLevel, LogFormat = %q, %q", c.LogLevel, c.LogFormat)
	}
	if _, err := Load([]string{"PROGRESSDB_LOG_LEVEL=LOUD"}); err == nil {
		t.Fatal("LOUD accepted")
	}
}

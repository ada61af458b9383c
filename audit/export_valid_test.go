package audit

import (
	"encoding/json"
	"strings"
	"testing"
)

var validJSONSeeds = []string{
	`{"id":"m1","thread":"t1","author":"ann","body":{"text":"hi \u00e9 \"q\" \\ \/"},"ts":1,"version":1,"deleted":false,"deleted_ts":0}`,
	`[]`, `{}`, ` [ 1 , -0.5e+10 , 2E3 , true , false , null , "x" ] `, `"\ud800"`, "\"\xff\xfe\"",
	`{"a":{"b":[{"c":[]}]}}`, `-`, `01`, `1.`, `.5`, `1e`, `+1`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a":}`,
	`{1:2}`, `[1 2]`, `"unterminated`, "\"tab\there\"", `"\x"`, `"\u12G4"`, `tru`, `nul`, `falsey`,
	`{"a":1}{"b":2}`, `[}`, `{]`, ``, ` `, `[[[]]`, `]`, "{\"a\":\n1\r\n}",
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 10000) + "{}" + strings.Repeat("]", 10000),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range validJSONSeeds {
		if got, want := validValue([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%.60q) = %v, json.Valid says %v", s, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range validJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validValue(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	v := []byte(validJSONSeeds[0])
	b.SetBytes(int64(len(v)))
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			validValue(v)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			json.Valid(v)
		}
	})
}

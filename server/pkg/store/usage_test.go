package store_test

import (
	"strings"
	"testing"
)

// Usage counts the database's files (growing as data is flushed to
// tables) and reports its volume's space.
func TestUsage(t *testing.T) {
	s := openStore(t, newClock())
	before, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if before.DiskBytes == 0 || before.VolumeSize == 0 || before.VolumeFree > before.VolumeSize {
		t.Fatalf("usage of a new store: %+v", before)
	}
	createThread(t, s, "t")
	body := strings.Repeat("x", 64<<10)
	for i := range 32 {
		appendMessage(t, s, "t", "m"+string(rune('a'+i%26))+string(rune('a'+i/26)), body)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	after, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if after.DiskBytes < before.DiskBytes+1<<20 {
		t.Fatalf("2 MiB written and flushed: disk bytes %d -> %d", before.DiskBytes, after.DiskBytes)
	}
}

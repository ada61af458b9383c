package store

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// effectCommand is a command of term with an effect of kind and an
// empty batch, as ProposeEffect (writeState) or ProposeDestroy
// (writePurge) build it.
func effectCommand(t *testing.T, s *Store, id, term uint64, wk writeKind, kind EffectKind, effect string) []byte {
	t.Helper()
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.LogData(nil, nil)
	return Command{ID: id, Term: term, Kind: uint8(wk), Repr: b.Repr(), Effect: []byte(effect), EffectKind: kind}.Encode()
}

// Effects of each kind reach the Effects set for that kind, once per
// command; a kind with none stops the apply. A destroy is applied as a
// purge: the erase is owed, and its span covers the log up to it. A
// command encoded before effects had kinds (version 2) is the audit
// trail's.
func TestEffectsByKind(t *testing.T) {
	ctx := context.Background()
	s := openPlain(t)
	got := map[EffectKind][]string{}
	for _, k := range []EffectKind{EffectTrail, EffectKeys} {
		s.SetEffects(k, func(_ context.Context, effect []byte) error {
			got[k] = append(got[k], string(effect))
			return nil
		})
	}
	if err := s.ApplyCommand(ctx, 3, 2, effectCommand(t, s, 1, 2, writeState, EffectTrail, "line")); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCommand(ctx, 4, 2, effectCommand(t, s, 2, 2, writeState, EffectKeys, "create")); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyCommand(ctx, 5, 2, effectCommand(t, s, 2, 2, writeState, EffectKeys, "create")); err != nil {
		t.Fatal(err) // the same ID again: not made twice
	}
	l, err := s.RaftLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Purges(); p != 0 {
		t.Fatalf("an effect that destroys nothing noted a purge at %d", p)
	}
	if err := s.ApplyCommand(ctx, 6, 2, effectCommand(t, s, 3, 2, writePurge, EffectKeys, "destroy")); err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Purges(); p != 6 {
		t.Fatalf("a destroy noted a purge at %d, want 6", p)
	}
	if erased, err := s.Erased(ctx); err != nil || erased {
		t.Fatalf("erased %v (%v) after a destroy, want it owed", erased, err)
	}
	if !bytes.Equal(l.owed.spans[0].Start, raftLogKey(0)) || !bytes.Equal(l.owed.spans[0].End, raftLogKey(7)) {
		t.Fatalf("a destroy owes %q, want the log up to it", l.owed.spans)
	}
	if want := []string{"line"}; len(got[EffectTrail]) != 1 || got[EffectTrail][0] != want[0] {
		t.Fatalf("trail effects %q, want %q", got[EffectTrail], want)
	}
	if len(got[EffectKeys]) != 2 || got[EffectKeys][0] != "create" || got[EffectKeys][1] != "destroy" {
		t.Fatalf("key effects %q", got[EffectKeys])
	}

	// Version 2: the effect without its kind.
	v3 := effectCommand(t, s, 4, 2, writeState, EffectKeys, "old")
	v2 := append([]byte{commandVersionEffect}, v3[1:commandHeader]...)
	v2 = append(v2, v3[commandHeader+1:]...)
	c, err := DecodeCommand(v2)
	if err != nil || c.EffectKind != EffectTrail || string(c.Effect) != "old" {
		t.Fatalf("version 2 decodes to kind %d effect %q (%v)", c.EffectKind, c.Effect, err)
	}
	bad := bytes.Clone(v3)
	bad[commandHeader] = byte(effectKinds)
	if _, err := DecodeCommand(bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("an unknown effect kind: %v", err)
	}

	s.SetEffects(EffectKeys, nil)
	if err := s.ApplyCommand(ctx, 7, 2, effectCommand(t, s, 5, 2, writeState, EffectKeys, "x")); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("an effect with no Effects of its kind: %v", err)
	}
}

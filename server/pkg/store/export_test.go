package store

// DropSealer makes s forget its Sealer, as a caller that forgot one would
// have it: the tests of the store's own refusal of plaintext use it. It
// returns a function that gives it back.
func DropSealer(s *Store) (restore func()) {
	sealer := s.sealer
	s.sealer = nil
	return func() { s.sealer = sealer }
}

// Internal keys the tests of the format and the seal edit under the
// store's back.
const (
	FormatKeyForTest = formatKey
	SealKeyForTest   = sealKey
)

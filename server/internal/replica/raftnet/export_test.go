package raftnet

// WriteRaw writes b as is into the open stream to node, as a broken or
// hostile sender would; false when no stream is open. Writes to the
// stream are whole, so b never splits a frame of the sender's.
func WriteRaw(t *Transport, node string, b []byte) bool {
	t.mu.Lock()
	p := t.peers[node]
	t.mu.Unlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	s := p.cur
	p.mu.Unlock()
	if s == nil {
		return false
	}
	_, err := s.w.Write(b)
	return err == nil
}

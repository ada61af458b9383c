// Package tcpproxy forwards TCP connections to a target until a test
// cuts it: how tests partition a node from its peers, or clients from a
// server, while both ends go on running.
package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy listens on a free loopback port and forwards each connection to
// its target, byte for byte both ways.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cut      bool                  // guarded by mu
	closed   bool                  // guarded by mu
	accepted int                   // guarded by mu
	conns    map[net.Conn]struct{} // open ones, both ends; guarded by mu
	wg       sync.WaitGroup
}

// New starts a proxy to target (host:port). Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where to connect (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is the number of connections accepted while not cut: a test
// sees from it how often a client connected.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Cut closes every connection and closes each new one at once, until
// Heal: to both ends the other is unreachable.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Heal forwards new connections again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. Closing twice does nothing.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed, p.cut = true, true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c, true) {
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.drop(c)
			continue
		}
		if !p.track(up, false) {
			p.drop(c)
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// track registers c (counted when accepted), or closes it while the
// proxy is cut.
func (p *Proxy) track(c net.Conn, accepted bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	if accepted {
		p.accepted++
	}
	return true
}

// drop closes c and forgets it.
func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = c.Close()
	delete(p.conns, c)
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.drop(dst)
	p.drop(src)
}

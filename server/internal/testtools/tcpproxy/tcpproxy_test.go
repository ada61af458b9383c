package tcpproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/progressdb/progressdb/server/internal/testtools/tcpproxy"
)

// echo serves lines back until the test ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader) (string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// Bytes pass both ways; a cut closes the open connection and every new
// one; after healing, new connections pass again.
func TestCutAndHeal(t *testing.T) {
	p, err := tcpproxy.New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r); err != nil || got != "ping\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Cut()
	if _, err := roundTrip(c, r); err == nil {
		t.Fatal("a connection open before the cut still works")
	}
	cut, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if _, err := roundTrip(cut, bufio.NewReader(cut)); err == nil {
			t.Fatal("a connection made during the cut works")
		}
		cut.Close()
	}
	p.Heal()
	healed, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer healed.Close()
	if got, err := roundTrip(healed, bufio.NewReader(healed)); err != nil || got != "ping\n" {
		t.Fatalf("after healing: %q, %v", got, err)
	}
	if n := p.Accepted(); n != 2 {
		t.Fatalf("accepted %d connections while not cut, want 2", n)
	}
	p.Close()
	p.Close()
}

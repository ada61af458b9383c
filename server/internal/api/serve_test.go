package api

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// Serve lets an in-flight request finish when its context ends, refuses
// new connections, and returns nil.
func TestServeShutsDownGracefully(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		w.WriteHeader(http.StatusTeapot)
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h, nil) }()

	status := make(chan int, 1)
	go func() {
		res, err := http.Get("http://" + addr + "/")
		if err != nil {
			status <- -1
			return
		}
		res.Body.Close()
		status <- res.StatusCode
	}()
	<-entered
	cancel()

	// Shutdown closes the listener first; wait until new dials fail.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepts after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v before the in-flight request finished", err)
	default:
	}

	close(release)
	if got := <-status; got != http.StatusTeapot {
		t.Fatalf("in-flight request got %d", got)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestServeReportsListenerFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := Serve(context.Background(), ln, http.NotFoundHandler(), nil); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}

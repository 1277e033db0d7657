package metrics

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeBounds: connections beyond MaxConns are closed as they come;
// a held one is closed after ReadHeaderTimeout and its place serves a
// request again.
func TestServeBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const timeout = 300 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	go Serve(ln, h, ServerOptions{ReadHeaderTimeout: timeout, MaxConns: 2})
	addr := ln.Addr().String()

	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")) // half a request
		return c
	}
	held := []net.Conn{dial(), dial()}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	extra := dial()
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(timeout / 2))
	if n, err := extra.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Errorf("a third connection with two held: read %d, %v; want it closed at once", n, err)
	}
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(5 * timeout))
		io.ReadAll(c) // the server answers 408 or closes
	}
	if waited := time.Since(start); waited > 3*timeout {
		t.Errorf("held connections closed after %v; want about %v", waited, timeout)
	}
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("a request once the held connections timed out: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("answer %q", b)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestServerOptions: zero fields take the documented defaults; a negative
// one is refused by name.
func TestServerOptions(t *testing.T) {
	d := DefaultServerOptions()
	if d.ReadHeaderTimeout != 10*time.Second || d.ReadTimeout != 10*time.Second || d.WriteTimeout != 10*time.Second ||
		d.IdleTimeout != 10*time.Second || d.MaxConns != 16 {
		t.Errorf("defaults %+v", d)
	}
	o := d
	o.IdleTimeout = -time.Second
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "IdleTimeout -1s") {
		t.Errorf("IdleTimeout -1s: %v", err)
	}
	o = d
	o.MaxConns = -3
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "MaxConns -3") {
		t.Errorf("MaxConns -3: %v", err)
	}
}

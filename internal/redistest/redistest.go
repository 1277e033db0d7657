// Package redistest runs a real redis-server for tests.
package redistest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Server is a real redis-server on a Unix socket, with no persistence (a
// restart forgets every lease).
type Server struct {
	t    *testing.T
	sock string
	args []string
	cmd  *exec.Cmd
}

// Start runs redis-server with its socket in dir and the extra arguments,
// stopped when the test ends; the test is skipped where redis-server is
// not installed.
func Start(t *testing.T, dir string, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("skipping: redis-server is not installed (apt-get install redis-server)")
	}
	r := &Server{t: t, sock: filepath.Join(dir, "redis.sock")}
	r.args = append([]string{"--port", "0", "--unixsocket", r.sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no"}, extra...)
	r.Restart()
	t.Cleanup(r.Stop)
	return r
}

// URL returns the server's URL.
func (r *Server) URL() string { return "unix://" + r.sock }

// Restart starts the server again after Stop (Start starts it first), and
// returns once it listens.
func (r *Server) Restart() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", r.args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", r.sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server did not listen on %s", r.sock)
		}
	}
}

// Stop kills the server.
func (r *Server) Stop() {
	if r.cmd != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
		os.Remove(r.sock)
	}
}

// Socket returns the path of the server's Unix socket.
func (r *Server) Socket() string { return r.sock }

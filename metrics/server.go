package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServerOptions bound what the clients of the metrics server may hold of
// the daemon, whose descriptors are also every tenant's open files: a
// connection costs one, and one that sends half a request and waits
// would otherwise hold it for good.
type ServerOptions struct {
	// ReadHeaderTimeout is the longest a connection may take to send a
	// request's headers, from being accepted or from the end of its
	// previous answer. The default is 10 s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout is the longest a connection may take to send a whole
	// request. The default is 10 s.
	ReadTimeout time.Duration
	// WriteTimeout is the longest from the end of a request's headers to
	// the end of its answer. The default is 10 s.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. The default is 10 s.
	IdleTimeout time.Duration
	// MaxConns is the most connections served at once; one accepted
	// beyond it is closed at once, so a flood of them costs no more than
	// MaxConns descriptors for at most the timeouts above. The default
	// is 16.
	MaxConns int
}

// DefaultServerOptions returns the defaults of every field.
func DefaultServerOptions() ServerOptions {
	var o ServerOptions
	o.EnsureDefaults()
	return o
}

// EnsureDefaults sets every zero field to its default.
func (o *ServerOptions) EnsureDefaults() {
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 10 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 10 * time.Second
	}
	if o.MaxConns == 0 {
		o.MaxConns = 16
	}
}

// Validate checks the options after EnsureDefaults: no timeout or bound
// may be negative (zero would mean none).
func (o ServerOptions) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"ReadHeaderTimeout", o.ReadHeaderTimeout}, {"ReadTimeout", o.ReadTimeout},
		{"WriteTimeout", o.WriteTimeout}, {"IdleTimeout", o.IdleTimeout},
	} {
		if f.d <= 0 {
			return fmt.Errorf("metrics server: %s %v: want more than 0", f.name, f.d)
		}
	}
	if o.MaxConns <= 0 {
		return fmt.Errorf("metrics server: MaxConns %d: want at least 1", o.MaxConns)
	}
	return nil
}

// Serve serves h on ln within o's bounds (zero fields take their
// defaults) until ln is closed.
func Serve(ln net.Listener, h http.Handler, o ServerOptions) error {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
	}
	err := srv.Serve(&capListener{Listener: ln, free: o.MaxConns})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// capListener hands out at most free connections at once; it closes
// those accepted beyond that at once.
type capListener struct {
	net.Listener
	mu   sync.Mutex
	free int
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		ok := l.free > 0
		if ok {
			l.free--
		}
		l.mu.Unlock()
		if ok {
			return &capConn{Conn: c, l: l}, nil
		}
		c.Close()
	}
}

// capConn gives its place back when closed, once.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.free++
		c.l.mu.Unlock()
	})
	return err
}

package fsys

import (
	"strings"
	"testing"
)

// TestTransportOption: Options.Transport defaults to DefaultTransport,
// dev never asks for io_uring, auto asks where the kernel offers it, uring
// fails where it does not (saying why), and any other value is refused
// with the values allowed.
func TestTransportOption(t *testing.T) {
	offered, why := URingOffered()
	for _, tc := range []struct {
		in, out string
		uring   bool
		err     string
	}{
		{"", DefaultTransport, DefaultTransport != TransportDev && offered, ""},
		{TransportDev, TransportDev, false, ""},
		{TransportAuto, TransportAuto, offered, ""},
		{TransportURing, TransportURing, offered, map[bool]string{true: "", false: why}[offered]},
		{"io_uring", "io_uring", false, `transport "io_uring": want auto, dev or uring`},
	} {
		opts := Options{Transport: tc.in}
		uring, err := transport(&opts)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("transport %q: %v", tc.in, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("transport %q: error %v, want one saying %q", tc.in, err, tc.err)
		case err == nil && (uring != tc.uring || opts.Transport != tc.out):
			t.Errorf("transport %q: io_uring %v, Transport %q; want %v, %q", tc.in, uring, opts.Transport, tc.uring, tc.out)
		}
	}
}

package fsys

import "testing"

// TestKillPending: SIGKILL pending for the thread or the process marks a
// dying caller; other pending signals do not.
func TestKillPending(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   bool
	}{
		{"Name:\tcat\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\n", false},
		{"SigPnd:\t0000000000000200\nShdPnd:\t0000000000000000\n", false}, // SIGUSR1 (10)
		{"SigPnd:\t0000000000000100\nShdPnd:\t0000000000000000\n", true},  // SIGKILL for the thread
		{"SigPnd:\t0000000000000000\nShdPnd:\t0000000000000100\n", true},  // SIGKILL for the process
		{"SigPnd:\t0000000000002000\nShdPnd:\t0000000000000001\n", false}, // SIGALRM, SIGHUP
	} {
		if got := killPending([]byte(tc.status)); got != tc.want {
			t.Errorf("killPending(%q) = %v, want %v", tc.status, got, tc.want)
		}
	}
}

package group

import (
	"math"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"4096", 4096},
		{"4096B", 4096},
		{" 7 ", 7},
		{"1k", 1 << 10},
		{"1K", 1 << 10},
		{"1KiB", 1 << 10},
		{"128KiB", 131072},
		{"512k", 512 << 10},
		{"1M", 1 << 20},
		{"10MiB", 10 << 20},
		{"1G", 1 << 30},
		{"2GiB", 2 << 30},
		{"1T", 1 << 40},
		{"3TiB", 3 << 40},
		{"1kB", 1000},
		{"10MB", 10_000_000},
		{"1GB", 1_000_000_000},
		{"2TB", 2_000_000_000_000},
		{"1.5MiB", 1572864},
		{"1.5k", 1536},
		{"0.5KiB", 512},
		{"1.0001KiB", 1024}, // 1024.1024 rounds down
		{"1.0005KiB", 1025}, // 1024.512 rounds up
		{"0.5", 1},          // ties round up
		{"1.25MB", 1250000},
		{"007", 7},
		{"9223372036854775807", math.MaxInt64},
		{"8388607.999999TiB", 9223372036853676296}, // exact product, rounded
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	const units = "want a number with an optional unit (B, k, K, M, G, T, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
	for _, tc := range []struct{ in, want string }{
		{"", "empty size: " + units},
		{"10XB", `bad size "10XB": ` + units},
		{"MiB", `bad size "MiB": ` + units},
		{"1.", `bad size "1.": ` + units},
		{".5k", `bad size ".5k": ` + units},
		{"1e6", `bad size "1e6": ` + units},
		{"0x10", `bad size "0x10": ` + units},
		{"+5", `bad size "+5": ` + units},
		{"1 MiB", `bad size "1 MiB": ` + units},
		{"1m", `bad size "1m": ` + units},
		{"1KB", `bad size "1KB": ` + units},
		{"1kib", `bad size "1kib": ` + units},
		{"1b", `bad size "1b": ` + units},
		{"-1", `bad size "-1": must not be negative`},
		{"-1.5MiB", `bad size "-1.5MiB": must not be negative`},
		{"--1", `bad size "--1": ` + units},
		{"0.4", `bad size "0.4": rounds to 0 bytes`},
		{"9223372036854775808", `bad size "9223372036854775808": larger than the maximum, 9223372036854775807`},
		{"8388608TiB", `bad size "8388608TiB": larger than the maximum, 9223372036854775807`},
		{"99999999999999999999999999", `bad size "99999999999999999999999999": larger than the maximum, 9223372036854775807`},
	} {
		n, err := ParseSize(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want error %q", tc.in, n, err, tc.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{1, "1"},
		{1000, "1000"},
		{1023, "1023"},
		{1024, "1KiB"},
		{1536, "1536"},
		{131072, "128KiB"},
		{1572864, "1536KiB"},
		{10485760, "10MiB"},
		{3 << 30, "3GiB"},
		{5 << 40, "5TiB"},
		{1 << 50, "1024TiB"},
		{1_000_000, "1000000"},
		{-5, "-5"},
		{math.MaxInt64, "9223372036854775807"},
	} {
		if got := FormatSize(tc.in); got != tc.want {
			t.Errorf("FormatSize(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestFormatSizeRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 512, 1000, 1024, 4095, 4096, 1 << 20, 3<<20 + 1, 7 << 30, 1 << 40, 1 << 62, math.MaxInt64, math.MaxInt64 - 1023} {
		s := FormatSize(n)
		got, err := ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
	// Every unit, formatted and parsed again.
	for u, size := range sizeUnits {
		n, err := ParseSize("3" + u)
		if err != nil || n != 3*size {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", "3"+u, n, err, 3*size)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), back, err)
		}
	}
}

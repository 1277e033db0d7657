package block

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	const k = 1024
	tests := []struct {
		name            string
		off, len, maxIO int64
		want            []Piece
	}{
		{"empty", 0, 0, 128 * k, nil},
		{"negative", 0, -1, 128 * k, nil},
		{"small", 4 * k, 4 * k, 128 * k, []Piece{{4 * k, 4 * k}}},
		{"exact", 0, 128 * k, 128 * k, []Piece{{0, 128 * k}}},
		{"one over", 0, 128*k + 1, 128 * k, []Piece{{0, 128 * k}, {128 * k, 1}}},
		{"1MiB in 8", 1 << 20, 1 << 20, 128 * k, []Piece{
			{1<<20 + 0*128*k, 128 * k}, {1<<20 + 1*128*k, 128 * k}, {1<<20 + 2*128*k, 128 * k}, {1<<20 + 3*128*k, 128 * k},
			{1<<20 + 4*128*k, 128 * k}, {1<<20 + 5*128*k, 128 * k}, {1<<20 + 6*128*k, 128 * k}, {1<<20 + 7*128*k, 128 * k},
		}},
		{"unaligned start", 3, 300, 128, []Piece{{3, 128}, {131, 128}, {259, 44}}},
		{"no limit", 0, 1 << 30, 0, []Piece{{0, 1 << 30}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.off, tc.len, tc.maxIO)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Split(%d, %d, %d) = %v, want %v", tc.off, tc.len, tc.maxIO, got, tc.want)
			}
			if n := Count(tc.len, tc.maxIO); n != int64(len(tc.want)) {
				t.Fatalf("Count(%d, %d) = %d, want %d", tc.len, tc.maxIO, n, len(tc.want))
			}
			var sum int64
			for _, p := range got {
				sum += p.Len
			}
			if tc.len > 0 && sum != tc.len {
				t.Fatalf("pieces sum to %d bytes, want %d (bytes are charged once)", sum, tc.len)
			}
		})
	}
}

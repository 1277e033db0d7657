// Package block splits requests into the pieces a device sees.
//
// A device accepts requests of at most max_io bytes; a larger request is
// split into consecutive pieces. Each piece is one device I/O for IOPS
// accounting, while the bytes of the whole request are charged exactly once
// (the sum of the pieces).
package block

// Piece is one device-visible I/O: Len bytes at Off.
type Piece struct {
	Off, Len int64
}

// Split cuts [off, off+length) into pieces of at most maxIO bytes, starting
// at off, in order. A length of zero or less yields no pieces. A maxIO of
// zero or less means no limit: one piece.
func Split(off, length, maxIO int64) []Piece {
	if length <= 0 {
		return nil
	}
	if maxIO <= 0 || length <= maxIO {
		return []Piece{{off, length}}
	}
	out := make([]Piece, 0, Count(length, maxIO))
	for length > 0 {
		n := min(length, maxIO)
		out = append(out, Piece{off, n})
		off += n
		length -= n
	}
	return out
}

// Count is the number of pieces Split returns, without building them.
func Count(length, maxIO int64) int64 {
	if length <= 0 {
		return 0
	}
	if maxIO <= 0 {
		return 1
	}
	return (length + maxIO - 1) / maxIO
}

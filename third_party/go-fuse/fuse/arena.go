// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import "unsafe"

// RequestArena holds the buffers requests are read into
// (MountOptions.RequestArena).
type RequestArena interface {
	// Get returns a buffer of ReadBufferSize(MaxWrite) bytes, aligned by
	// AlignReadBuffer, whose first 4 bytes are zero; nil when none is
	// free.
	Get() []byte
	// Put takes back a buffer Get returned, once the request read into
	// it is answered (or nothing was read into it).
	Put(buf []byte)
}

// ReadBufferBytes is the memory a buffer of RequestArena is cut from
// (AlignReadBuffer) for a server of maxWrite.
func ReadBufferBytes(maxWrite int) int {
	_, readBufBytes, _ := requestAccountingSizes(maxWrite)
	return readBufBytes
}

// AlignReadBuffer cuts a buffer to read requests into, for a server of
// maxWrite, from mem, ReadBufferBytes(maxWrite) bytes: aligned as the
// server's own, so that a write's data lies on a block boundary.
func AlignReadBuffer(mem []byte, maxWrite int) []byte {
	readBufSize, _, _ := requestAccountingSizes(maxWrite)
	return alignSlice(mem, unsafe.Sizeof(WriteIn{}), logicalBlockSize, uintptr(readBufSize))
}

// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

// FUSE-over-io_uring is Linux's: elsewhere MountOptions.IOUring is
// ignored and /dev/fuse serves.

// DefaultIOUringDepth is the number of ring entries per queue when
// MountOptions.IOUringDepth is 0.
const (
	DefaultIOUringDepth = 16
	MaxIOUringDepth     = 256
)

type uringTransport struct{}

func (ms *Server) setupURing()    {}
func (ms *Server) registerURing() {}
func (ms *Server) startURing()    {}

// IOUring reports whether requests are served over io_uring: never here.
func (ms *Server) IOUring() bool { return false }

// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

//go:build !linux

package fuse

import (
	"errors"
	"time"
)

var errHandoverLinux = errors.New("handover: supported on Linux only")

// Handover hands the connection over to another server on Linux; here
// it fails.
func (ms *Server) Handover(wait time.Duration) (*Handoff, error) {
	return nil, errHandoverLinux
}

// NewServerFrom serves a connection handed over on Linux; here it fails.
func NewServerFrom(fs RawFileSystem, mountPoint string, h *Handoff, opts *MountOptions) (*Server, error) {
	return nil, errHandoverLinux
}

// Connection returns the connection's Handoff on Linux; here it fails.
func (ms *Server) Connection() (*Handoff, error) {
	return nil, errHandoverLinux
}

// Replay serves requests of a server that died on Linux; here it does
// nothing.
func (ms *Server) Replay(bufs [][]byte) {}

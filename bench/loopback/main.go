// Command loopback mounts a plain go-fuse loopback file system: the
// baseline the sluice benchmarks compare against.
//
//	loopback [-direct-io] [-no-passthrough] [-timeout D] [-default-permissions] SOURCE MOUNTPOINT
//
// It runs in the foreground and unmounts on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// directNode is a LoopbackNode whose opens ask for FOPEN_DIRECT_IO, so every
// read and write reaches this process instead of the kernel page cache.
type directNode struct {
	fs.LoopbackNode
}

var _ = (fs.NodeOpener)((*directNode)(nil))

func (n *directNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return fh, fuseFlags | fuse.FOPEN_DIRECT_IO, errno
}

func main() {
	directIO := flag.Bool("direct-io", false, "open files with FOPEN_DIRECT_IO (bypass the kernel page cache)")
	noPassthrough := flag.Bool("no-passthrough", false, "refuse FUSE passthrough so reads and writes reach this process")
	timeout := flag.Duration("timeout", 0, "entry and attribute timeout the kernel may cache lookups and attributes for (0: none)")
	allowOther := flag.Bool("allow-other", false, "let other users than the mounting one use the mount (allow_other)")
	defaultPerms := flag.Bool("default-permissions", false, "let the kernel check every caller's permissions (as sluice does); costs a GETATTR of a directory after each change in it")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-direct-io] [-no-passthrough] [-timeout D] [-default-permissions] SOURCE MOUNTPOINT\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}

	root, err := fs.NewLoopbackRoot(flag.Arg(0))
	if err != nil {
		log.Fatalf("loopback root: %v", err)
	}
	if *directIO {
		lr := root.(*fs.LoopbackNode).RootData
		lr.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &directNode{fs.LoopbackNode{RootData: r}}
		}
	}

	opts := &fs.Options{}
	if *timeout > 0 {
		opts.EntryTimeout, opts.AttrTimeout = timeout, timeout
	}
	if *noPassthrough {
		opts.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	opts.AllowOther = *allowOther
	if *defaultPerms {
		opts.Options = append(opts.Options, "default_permissions")
	}
	server, err := fs.Mount(flag.Arg(1), root, opts)
	if err != nil {
		log.Fatalf("mount: %v", err)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		if err := server.Unmount(); err != nil {
			log.Printf("unmount: %v", err)
		}
	}()
	server.Wait()
}

package stack

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidate: the defaults are valid; a bad value of each field gives an
// OptionError naming the field and the value, and saying what is allowed.
func TestValidate(t *testing.T) {
	if o := DefaultOptions(); o.Validate() != nil {
		t.Fatalf("defaults: %v", o.Validate())
	}
	for _, tc := range []struct {
		set         func(*Options)
		field, want string
	}{
		{func(o *Options) { o.MaxIO = 0 }, "MaxIO", "MaxIO 0: want a multiple of 4KiB from 4KiB to 1GiB"},
		{func(o *Options) { o.MaxIO = 3 << 10 }, "MaxIO", "MaxIO 3KiB:"},
		{func(o *Options) { o.MaxIO = 2 << 30 }, "MaxIO", "MaxIO 2GiB:"},
		{func(o *Options) { o.Readahead = 1000 }, "Readahead", "Readahead 1000: want 0 (off) or a multiple of 4KiB up to 64MiB"},
		{func(o *Options) { o.Readahead = 128 << 20 }, "Readahead", "Readahead 128MiB:"},
		{func(o *Options) { o.CacheBytes = 1 << 20 }, "CacheBytes", "CacheBytes 1MiB: want at least 16 readahead windows, 2MiB"},
		{func(o *Options) { o.CacheBytes, o.Readahead = 32<<10, 0 }, "CacheBytes", "CacheBytes 32KiB: want at least 16 pages, 64KiB"},
		{func(o *Options) { o.Burst = -time.Second }, "Burst", "Burst -1s: want 0 (no idle credit)"},
		{func(o *Options) { o.MaxWait = -time.Second }, "MaxWait", "MaxWait -1s: want 0 (no cap)"},
	} {
		o := DefaultOptions()
		tc.set(&o)
		err := o.Validate()
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v; want an OptionError for %s containing %q", o, err, tc.field, tc.want)
		}
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted options that fail Validate", o)
		}
	}
	// 0 turns readahead, idle credit and the wait cap off.
	o := DefaultOptions()
	o.Readahead, o.Burst, o.MaxWait, o.CacheBytes = 0, 0, 0, 64<<10
	if err := o.Validate(); err != nil {
		t.Fatalf("readahead, burst and max wait off: %v", err)
	}
}

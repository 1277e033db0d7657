package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape fetches and parses /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample returns the metric of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// TestMetrics: after a known workload through a real mount, /metrics
// counts its bytes and I/Os, the throttle waits of every device read, the
// group's limit; a mirror set's mirrors are there with their state.
func TestMetrics(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	const size = 4 << 20
	os.WriteFile(filepath.Join(src, "f"), make([]byte, size), 0o644)
	addr := freeAddr(t)
	startMount(t, mnt, "mount", "--metrics-listen", addr, "--cache-mode", "direct",
		"--group", "tenants/a uid=4242", "--limit", "tenants/a rbps=64MiB", src, mnt)
	dd := exec.Command("dd", "if="+filepath.Join(mnt, "f"), "of=/dev/null", "bs=64k")
	dd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if out, err := dd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v\n%s", err, out)
	}
	fams := scrape(t, addr)
	ta := map[string]string{"group": "tenants/a", "direction": "read"}
	app := sample(fams, "sluice_app_bytes_total", ta)
	dev := sample(fams, "sluice_device_bytes_total", ta)
	ios := sample(fams, "sluice_device_ios_total", ta)
	wait := sample(fams, "sluice_throttle_wait_seconds", ta)
	lim := sample(fams, "sluice_limit_bytes_per_second", ta)
	parent := sample(fams, "sluice_app_bytes_total", map[string]string{"group": "tenants", "direction": "read"})
	switch {
	case app == nil || app.GetCounter().GetValue() != size:
		t.Errorf("sluice_app_bytes_total of tenants/a: %v, want %d", app, size)
	case dev == nil || dev.GetCounter().GetValue() < size:
		t.Errorf("sluice_device_bytes_total of tenants/a: %v, want at least %d", dev, size)
	case ios == nil || wait == nil || float64(wait.GetHistogram().GetSampleCount()) != ios.GetCounter().GetValue():
		t.Errorf("throttle wait histogram %v against device I/Os %v: one wait per I/O", wait, ios)
	case lim == nil || lim.GetGauge().GetValue() != 64<<20:
		t.Errorf("sluice_limit_bytes_per_second: %v", lim)
	case parent == nil || parent.GetCounter().GetValue() != size:
		t.Errorf("the parent group's bytes: %v", parent)
	}
	if t.Failed() {
		return
	}

	// A mirror set's mirrors.
	dir, _, mnt2 := srcMnt(t)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.Mkdir(a, 0o755)
	os.Mkdir(b, 0o755)
	addr2 := freeAddr(t)
	startMount(t, mnt2, "mount", "--metrics-listen", addr2, "--mirror", a, "--mirror", b, mnt2)
	os.WriteFile(filepath.Join(mnt2, "g"), []byte(strings.Repeat("x", 1<<16)), 0o644)
	// Reads past the mount's page cache reach a mirror.
	fd, err := syscall.Open(filepath.Join(mnt2, "g"), syscall.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	for range 4 {
		if n, err := syscall.Pread(fd, buf, 0); err != nil || n != len(buf) {
			t.Fatalf("read through the mirror set: %d bytes, %v", n, err)
		}
	}
	syscall.Close(fd)
	fams = scrape(t, addr2)
	var reads, took float64
	for _, d := range []string{a, b} {
		if r := sample(fams, "sluice_mirror_reads_total", map[string]string{"mirror": d}); r != nil {
			reads += r.GetCounter().GetValue()
		}
		if s := sample(fams, "sluice_mirror_read_seconds_total", map[string]string{"mirror": d}); s != nil {
			took += s.GetCounter().GetValue()
		}
	}
	if reads < 4 || took <= 0 {
		t.Errorf("the mirrors' reads: %v, taking %v s in all; want at least 4, taking some time", reads, took)
	}
	for _, d := range []string{a, b} {
		st := sample(fams, "sluice_mirror_state", map[string]string{"mirror": d, "state": "healthy"})
		if st == nil || st.GetGauge().GetValue() != 1 {
			t.Errorf("sluice_mirror_state of %s: %v", d, st)
		}
		if sample(fams, "sluice_mirror_reads_total", map[string]string{"mirror": d}) == nil {
			t.Errorf("no sluice_mirror_reads_total for %s", d)
		}
	}
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"sluice/control"
	"sluice/internal/redistest"
)

// fioRead runs fio as uid 4201, reading f directly for secs seconds, and
// returns it to wait for with its bytes read and its longest read, µs.
func fioRead(t *testing.T, f string, secs int) func() (bytes int64, maxLatUs float64) {
	t.Helper()
	cmd := exec.Command("fio", "--name=r", "--filename="+f, "--rw=read", "--bs=64k", "--direct=1", "--ioengine=psync",
		"--time_based", fmt.Sprintf("--runtime=%d", secs), "--output-format=json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4201, Gid: 4201}}
	cmd.Dir = "/"
	out := new(strings.Builder)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() (int64, float64) {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("fio on %s: %v\n%s", f, err, out)
		}
		var res struct {
			Jobs []struct {
				Read struct {
					IOBytes int64 `json:"io_bytes"`
					ClatNs  struct {
						Max float64 `json:"max"`
					} `json:"clat_ns"`
				} `json:"read"`
			} `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(out.String()), &res); err != nil || len(res.Jobs) != 1 {
			t.Fatalf("fio's output: %v\n%s", err, out)
		}
		return res.Jobs[0].Read.IOBytes, res.Jobs[0].Read.ClatNs.Max / 1e3
	}
}

// TestClusterShare: four mounts of one cluster, each serving readers of
// group builds (uid 4201) whose cap is rbps=16MiB, read 16 MiB/s between
// them, not 64, whether four read or two; one alone reads all of it; with
// Redis killed, no read waits past a lease and the four keep within the
// cap (each at a quarter, the cap over the hosts seen); with Redis back,
// they share it again. Each figure is measured over its run as the
// readers saw it. stat, /metrics and top show the cluster.
func TestClusterShare(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	dir, src, _ := srcMnt(t)
	r := redistest.Start(t, dir)
	const capBPS = 16 << 20
	hosts := []string{"h1", "h2", "h3", "h4"}
	// A file for each reader of each phase: what one phase read is in
	// sluice's cache, and a read from it is no read of SOURCE.
	for p := range 5 {
		for _, h := range hosts {
			f, err := os.Create(filepath.Join(src, fmt.Sprint(h, "-", p)))
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(256 << 20)
			f.Close()
		}
	}
	addr := freeAddr(t)
	var mnts []string
	var daemons []*exec.Cmd
	var exits []chan struct{}
	for i, host := range hosts {
		mnt := filepath.Join(dir, "m"+host)
		os.Mkdir(mnt, 0o755)
		mnts = append(mnts, mnt)
		args := []string{"mount", "--group", "builds uid=4201", "--limit", "builds rbps=16MiB",
			"--cluster", r.URL(), "--cluster-name", "t", "--cluster-host", host, "--cache-mode", "direct", src, mnt}
		if i == 0 {
			args = append([]string{"mount", "--metrics-listen", addr}, args[1:]...)
		}
		cmd, _, exited, _ := startMount(t, mnt, args...)
		daemons, exits = append(daemons, cmd), append(exits, exited)
	}
	n := 0
	phase := func(what string, secs int, readers int) (total float64, maxLatUs float64) {
		var waits []func() (int64, float64)
		for i, h := range hosts[:readers] {
			waits = append(waits, fioRead(t, filepath.Join(mnts[i], fmt.Sprint(h, "-", n)), secs))
		}
		n++
		var sum int64
		for _, w := range waits {
			n, lat := w()
			sum += n
			maxLatUs = max(maxLatUs, lat)
		}
		total = float64(sum) / float64(secs) / capBPS
		t.Logf("%s: %.3f of the cap, longest read %.0f ms", what, total, maxLatUs/1e3)
		return total, maxLatUs
	}
	if got, _ := phase("four hosts", 4, 4); got < 0.93 || got > 1.03 {
		t.Errorf("four hosts read %.3f of their shared cap, want 0.93-1.03", got)
	}
	if got, _ := phase("two hosts of four", 6, 2); got < 0.93 || got > 1.03 {
		t.Errorf("two hosts of four read %.3f of their shared cap, want 0.93-1.03", got)
	}
	if got, _ := phase("one host alone", 4, 1); got < 0.9 || got > 1.03 {
		t.Errorf("one host alone read %.3f of the shared cap, want 0.9-1.03", got)
	}
	out, err := sluice("stat", mnts[0]).Output()
	if err != nil || !strings.Contains(string(out), "cluster t as h1") || !strings.Contains(string(out), "16.0 MiB/s") {
		t.Errorf("stat of a cluster's mount: %v\n%s", err, out)
	}
	out, err = sluice("top", "--once", "--interval", "100ms", mnts[0]).Output()
	if err != nil || !strings.Contains(string(out), "cluster t as h1: 4 hosts") || !strings.Contains(string(out), "builds rbps  all") {
		t.Errorf("top --once of a cluster's mount: %v\n%s", err, out)
	}

	// Redis killed for 4 s of a 10 s run, then started afresh.
	go func() {
		time.Sleep(2 * time.Second)
		r.Stop()
		time.Sleep(4 * time.Second)
		r.Restart()
	}()
	got, lat := phase("Redis down 4 s of 10", 10, 4)
	if got > 1.03 || got < 0.85 {
		t.Errorf("with Redis down for 4 s of 10, the hosts read %.3f of the cap, want 0.85-1.03", got)
	}
	if lat > 1.5e6 {
		t.Errorf("with Redis down, a read took %.0f ms, more than a lease (1 s) and then some", lat/1e3)
	}
	if got, _ := phase("Redis back, two hosts of four", 4, 2); got < 0.93 || got > 1.03 {
		t.Errorf("with Redis back, two hosts of four read %.3f of their shared cap, want 0.93-1.03", got)
	}
	var st control.Status
	out, _ = sluice("stat", "--json", mnts[1]).Output()
	if json.Unmarshal(out, &st) != nil || st.Cluster == nil || st.Cluster.Failures == 0 || !st.Cluster.Answered || len(st.Cluster.Caps) != 1 {
		t.Errorf("stat --json after the outage: want failures counted and leases again:\n%s", out)
	}
	fams := scrape(t, addr)
	bg := map[string]string{"group": "builds", "cap": "rbps"}
	failed := sample(fams, "sluice_cluster_requests_total", map[string]string{"outcome": "failed"})
	answered := sample(fams, "sluice_cluster_requests_total", map[string]string{"outcome": "answered"})
	rtt := sample(fams, "sluice_cluster_round_trip_seconds", nil)
	shared := sample(fams, "sluice_cluster_cap_per_second", bg)
	lease := sample(fams, "sluice_cluster_lease_per_second", bg)
	switch {
	case failed == nil || failed.GetCounter().GetValue() == 0:
		t.Errorf("/metrics after the outage: failed requests %v, want some", failed)
	case answered == nil || rtt == nil || float64(rtt.GetHistogram().GetSampleCount()) != answered.GetCounter().GetValue():
		t.Errorf("/metrics: a round trip for each answered request: %v against %v", rtt, answered)
	case shared == nil || shared.GetGauge().GetValue() != capBPS:
		t.Errorf("/metrics: the shared cap %v, want %d", shared, capBPS)
	case lease == nil || lease.GetGauge().GetValue() <= 0 || lease.GetGauge().GetValue() > capBPS:
		t.Errorf("/metrics: h1's lease %v, want some of the cap", lease)
	}

	// A mount that stops gives its lease back at once.
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: r.Socket()})
	defer rdb.Close()
	key := "sluice:{t}:rbps:builds"
	if held, err := rdb.HGetAll(context.Background(), key).Result(); err != nil || held["h2"] == "" {
		t.Fatalf("%s while h2 serves: %v, %v", key, held, err)
	}
	daemons[1].Process.Signal(syscall.SIGTERM)
	<-exits[1]
	if held, err := rdb.HGetAll(context.Background(), key).Result(); err != nil || held["h2"] != "" || held["h1"] == "" {
		t.Errorf("%s once h2 stopped: %v, %v; want the others' leases alone", key, held, err)
	}
}

// TestClusterRefused: a mount whose Redis cannot be reached, refuses its
// password, or is given without a cluster name, does not start, and says
// so naming the flag, with no password shown; the right password is
// taken, on the command line or in a config file.
func TestClusterRefused(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	r := redistest.Start(t, dir, "--requirepass", "secret")
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--cluster", "unix://" + filepath.Join(dir, "none.sock"), "--cluster-name", "t"}, []string{"--cluster unix://", "no such file or directory"}},
		{[]string{"--cluster", "unix://:wrong@" + r.Socket(), "--cluster-name", "t"}, []string{"--cluster unix://:xxxxx@", "WRONGPASS"}},
		{[]string{"--cluster", r.URL(), "--cluster-name", "t"}, []string{"--cluster", "NOAUTH"}},
		{[]string{"--cluster", r.URL()}, []string{"--cluster unix://", "needs --cluster-name"}},
		{[]string{"--cluster-name", "t"}, []string{"give --cluster URL too"}},
		{[]string{"--cluster", "http://x", "--cluster-name", "t"}, []string{"--cluster \"http://x\"", "want redis://"}},
	} {
		out := refused(t, mnt, append(append([]string{"mount", "--limit", "builds rbps=1MiB"}, tc.args...), src, mnt), tc.want...)
		if strings.Contains(out, "secret") || strings.Contains(out, ":wrong@") {
			t.Errorf("sluice %s shows the password:\n%s", strings.Join(tc.args, " "), out)
		}
		if strings.Count(out, "\n") > 2 {
			t.Errorf("sluice %s: want the refusal and where to read more, no more:\n%s", strings.Join(tc.args, " "), out)
		}
	}
	// The right password is taken, from a config file too.
	cfg := filepath.Join(dir, "sluice.toml")
	os.WriteFile(cfg, fmt.Appendf(nil, "source = %q\nmountpoint = %q\ncluster = \"unix://:secret@%s\"\ncluster-name = \"farm\"\ncluster-host = \"h9\"\n"+
		"[[group]]\nname = \"builds\"\nlimits = \"rbps=1MiB\"\n", src, mnt, r.Socket()), 0o600)
	cmd, _, exited, _ := startMount(t, mnt, "mount", "--config", cfg)
	out, err := sluice("stat", mnt).Output()
	if err != nil || !strings.Contains(string(out), "cluster farm as h9, Redis unix://:xxxxx@") || !strings.Contains(string(out), ": leasing") {
		t.Errorf("stat of a mount whose config file names its cluster: %v\n%s", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
}

// refused runs sluice with args, a mount at mnt, and fails the test
// unless it is refused saying each of want; it returns what it said.
func refused(t *testing.T, mnt string, args []string, want ...string) string {
	t.Helper()
	out, err := sluice(args...).CombinedOutput()
	if isMounted(mnt) {
		exec.Command("umount", "-l", mnt).Run()
	}
	for _, w := range want {
		if err == nil || !strings.Contains(string(out), w) {
			t.Errorf("sluice %s: %v, want it refused saying %q:\n%s", strings.Join(args, " "), err, w, out)
			break
		}
	}
	return string(out)
}

// TestClusterTLS: a mount reaches its Redis over TLS (rediss://) where the
// server's certificate is signed by the authority --cluster-ca names, and
// refuses, naming the flag, where it is not, or where the flag cannot
// apply.
func TestClusterTLS(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("skipping: redis-server is not installed (apt-get install redis-server)")
	}
	dir, src, mnt := srcMnt(t)
	ca, srvCert, srvKey := testCerts(t, dir)
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command("redis-server", "--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--tls-cert-file", srvCert,
		"--tls-key-file", srvKey, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no", "--save", "", "--appendonly", "no")
	var log strings.Builder
	srv.Stdout = &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not listen on %s:\n%s", addr, log.String())
		}
	}
	url := "rediss://" + addr + "/0"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--cluster", url}, []string{"--cluster rediss://", "certificate"}},
		{[]string{"--cluster", "redis://" + addr, "--cluster-ca", ca}, []string{"--cluster-ca " + ca, "not a rediss:// URL"}},
		{[]string{"--cluster", url, "--cluster-ca", filepath.Join(dir, "none.pem")}, []string{"--cluster-ca ", "no such file"}},
		{[]string{"--cluster", url, "--cluster-ca", srvKey}, []string{"--cluster-ca ", "no PEM certificate"}},
		{[]string{"--cluster-ca", ca}, []string{"give --cluster URL too"}},
	} {
		refused(t, mnt, append(append([]string{"mount", "--limit", "builds rbps=1MiB", "--cluster-name", "t"}, tc.args...), src, mnt), tc.want...)
	}
	cmd, _, exited, _ := startMount(t, mnt, "mount", "--limit", "builds rbps=1MiB", "--cluster", url, "--cluster-name", "t", "--cluster-ca", ca, src, mnt)
	out, err := sluice("stat", mnt).Output()
	if err != nil || !strings.Contains(string(out), "Redis "+url+": leasing") {
		t.Errorf("stat of a mount leasing over TLS: %v\n%s", err, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
}

// testCerts writes a certificate authority and a server certificate it
// signs for 127.0.0.1, and returns their files and the server's key.
func testCerts(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("srv.pem", "CERTIFICATE", srvDER), write("srv.key", "EC PRIVATE KEY", keyDER)
}

package nsmachine

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/scavenger-ml/scavenger/internal/sshkey"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
)

// TestIsolatedMachine starts two isolated machines with sshd as init and
// checks, over SSH, their hostname, PID namespace (sshd is PID 1), private
// local disk, CPU quota and memory limit, that one reaches the other; then
// terminates them and checks that nothing is left.
func TestIsolatedMachine(t *testing.T) {
	if err := Check(true); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	if err := subreaper.Become(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	br, sfx := testBridge(t, ctx, "scvm")
	dir := t.TempDir()
	clientPub, err := sshkey.Write(filepath.Join(dir, "id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		t.Fatal(err)
	}
	hostPub, err := sshkey.Write(filepath.Join(dir, "hostkey"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Machine
	var addrs []string
	for i, cpus := range []float64{0.5, 1} {
		name := "m" + strconv.Itoa(i+1) + "-" + sfx
		addr := br.HostAddr(i + 1)
		cfg := filepath.Join(dir, name+".conf")
		sshd := SSHD{Addr: addr, HostKey: filepath.Join(dir, "hostkey"), AuthorizedKeys: filepath.Join(dir, "authorized_keys"), PidFile: "none"}
		if err := os.WriteFile(cfg, []byte(sshd.Config()), 0o600); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		m, err := Start(ctx, Spec{Name: name, NetNS: "scvm-" + sfx + "-" + strconv.Itoa(i), Veth: "scvm" + sfx + strconv.Itoa(i),
			Bridge: br, Addr: addr, Isolate: true, CPUs: cpus, MemoryBytes: 512 << 20, DiskBytes: 32 << 20,
			Cgroup: "scvm-" + sfx + "/" + name, Init: SSHDInit(cfg), Log: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Logf("machine %s started in %s", name, time.Since(began))
		ms = append(ms, m)
		addrs = append(addrs, net.JoinHostPort(addr, "22"))
	}
	defer func() {
		for _, m := range ms {
			began := time.Now()
			if err := m.Terminate(context.Background()); err != nil {
				t.Errorf("Terminate: %v", err)
			}
			t.Logf("machine %s terminated in %s", m.Spec.Name, time.Since(began))
			if left := m.Gone(); len(left) > 0 {
				t.Errorf("left of %s: %v", m.Spec.Name, left)
			}
		}
		if err := RemoveCgroup("scvm-" + sfx); err != nil {
			t.Error(err)
		}
	}()
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, []byte(knownhosts.Line(addrs, hostPub)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hk, err := knownhosts.New(known)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "id"))
	signer, err := gossh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &gossh.ClientConfig{User: "root", Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: hk, Timeout: 2 * time.Second}
	for i, m := range ms {
		var c *gossh.Client
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c, err = gossh.Dial("tcp", addrs[i], cfg); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			log, _ := os.ReadFile(m.Spec.Log)
			t.Fatalf("dial %s: %v\n%s", addrs[i], err, log)
		}
		s, _ := c.NewSession()
		out, err := s.CombinedOutput(`hostname; cat /proc/1/comm; test -d /mnt/tmp && touch /mnt/x && ls /mnt/x | cut -c6-; getent hosts $(hostname) | cut -d" " -f1; echo $(( $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || echo 0) )); ` +
			`bash -c 'exec 3<>/dev/tcp/` + ms[1-i].Spec.Addr + `/22 && head -c 4 <&3'`)
		c.Close()
		got := strings.Fields(string(out))
		if err != nil || len(got) < 5 || got[0] != m.Spec.Name || got[1] != "sshd" || got[2] != "x" || got[3] != m.Spec.Addr || !strings.HasPrefix(got[len(got)-1], "SSH-") {
			t.Errorf("machine %d: %q, %v", i, out, err)
		}
		if _, err := os.Stat("/mnt/x"); err == nil {
			t.Errorf("the machine's local disk is the host's /mnt")
		}
		q, _ := os.ReadFile(cgroupDir("cpu", m.Spec.Cgroup) + "/cpu.cfs_quota_us")
		if want := strconv.Itoa(int(m.Spec.CPUs * cfsPeriod)); strings.TrimSpace(string(q)) != want {
			t.Errorf("quota %s, want %s", q, want)
		}
	}
}

// TestWithoutRoot: without root, Check says that namespace machines need it.
func TestWithoutRoot(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	geteuid = func() int { return 1000 }
	if err := Check(true); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "needs root (uid 1000)") {
		t.Fatalf("Check as uid 1000 = %v", err)
	}
}

// TestCheckNamesAllThatIsMissing: Check names every missing piece in one
// message, with the fix of each: root, the tools, sshd's privilege
// separation directory (sshd exits at once without it) and the cgroup
// controllers.
func TestCheckNamesAllThatIsMissing(t *testing.T) {
	defer func(f func() int, p, r string) { geteuid, sshdPrivsep, cgroupRoot = f, p, r }(geteuid, sshdPrivsep, cgroupRoot)
	geteuid = func() int { return 1000 }
	sshdPrivsep = filepath.Join(t.TempDir(), "run", "sshd")
	cgroupRoot = t.TempDir()
	t.Setenv("PATH", t.TempDir())
	err := Check(true)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Check = %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"needs root (uid 1000)", "ip is missing", "unshare is missing", sshdPrivsep + " is missing (mkdir -p -m 0755 " + sshdPrivsep,
		"cgroup v1 controller cpu is not mounted", "cgroup v1 controller freezer is not mounted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v\nwant it to name %q", err, want)
		}
	}
	if strings.Count(err.Error(), ErrUnavailable.Error()) != 1 {
		t.Errorf("one message, not one per problem: %v", err)
	}
}

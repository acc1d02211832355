// Package testnet builds throwaway hosts for tests: Linux network
// namespaces on a private bridge, each with its own address, its own
// hostname (a UTS namespace) and its own sshd that accepts root with a key
// made for the test. The hosts share this machine's filesystem and process
// table; only the network and the hostname are theirs.
//
// It needs root, iproute2, unshare and /usr/sbin/sshd; New skips the test
// when any is missing or `ip netns add` fails (a container without
// CAP_SYS_ADMIN).
//
// Every name carries a random suffix and the /24 subnet is chosen at random
// in 10.160.0.0-10.223.255.0 among those that no route of this machine
// overlaps, so that test packages running at the same time do not collide.
// Traffic only ever goes to the addresses of the namespaces made here.
//
// The cleanup stops each sshd by its PID and reaps it, waits for the other
// processes in each namespace to end (reaping those orphaned to the test
// process, which New makes a child subreaper), reports as a test error any
// that remain (then kills them), deletes the namespaces and the bridge and
// checks that they are gone.
package testnet

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"
)

// SSHPort is the port every host's sshd listens on (in its own namespace).
const SSHPort = 22

const (
	sshdPath = "/usr/sbin/sshd"
	// settleTimeout bounds waiting for the processes in a namespace to end
	// at cleanup; sshd sessions whose client vanished end within about
	// 4 s (ClientAliveInterval 1, ClientAliveCountMax 3).
	settleTimeout = 8 * time.Second
)

// Host is one namespace host.
type Host struct {
	// Name is the hostname processes on the host see.
	Name string
	// NS is the network namespace (ip netns exec NS ...).
	NS string
	// Addr is the host's IPv4 address on the bridge; its sshd listens on
	// Addr:SSHPort.
	Addr string
	// Veth is the bridge side of the host's link: LinkDown cuts the host off.
	Veth string

	nsIno uint64
	sshd  *exec.Cmd
	log   *lockedBuffer
}

// Net is a set of namespace hosts on one bridge.
type Net struct {
	// Hosts are in the order they were made (h1, h2, ...).
	Hosts []*Host
	// Bridge is the bridge's name and BridgeAddr its address in this
	// (the root) namespace, from which the hosts are reached.
	Bridge     string
	BridgeAddr string
	// KeyFile is the client's private key (ed25519, unencrypted) that root
	// on every host accepts; KnownHosts lists every host's key.
	KeyFile    string
	KnownHosts string
	// Dir holds the keys, the sshd configs and the logs.
	Dir string

	t      testing.TB
	suffix string
	settle time.Duration // settleTimeout; shorter in this package's tests
}

// New makes n hosts (see the package comment) and registers their cleanup
// with t. It skips the test when the machine cannot make them.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("SKIP: testnet needs root for network namespaces (uid %d)", os.Geteuid())
	}
	for _, p := range []string{"ip", "unshare"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("SKIP: testnet needs %s: %v", p, err)
		}
	}
	if _, err := os.Stat(sshdPath); err != nil {
		t.Skipf("SKIP: testnet needs %s (apt-get install -y openssh-server): %v", sshdPath, err)
	}
	if err := subreaper.Become(); err != nil {
		t.Fatalf("testnet: become subreaper: %v", err)
	}
	suffix := randHex(t, 3)[:5]
	tn := &Net{t: t, suffix: suffix, settle: settleTimeout, Dir: t.TempDir(), Bridge: "scvt" + suffix + "br"}

	// The first namespace tells whether namespaces can be made here at all.
	first := "scvt-" + suffix + "-h1"
	if out, err := exec.Command("ip", "netns", "add", first).CombinedOutput(); err != nil {
		t.Skipf("SKIP: testnet: ip netns add failed (no CAP_SYS_ADMIN?): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(tn.cleanup)

	subnet := tn.pickSubnet()
	tn.BridgeAddr = subnet + ".1"
	tn.ip("link", "add", tn.Bridge, "type", "bridge")
	tn.ip("addr", "add", tn.BridgeAddr+"/24", "dev", tn.Bridge)
	tn.ip("link", "set", tn.Bridge, "up")
	for i := 1; i <= n; i++ {
		h := &Host{
			Name: fmt.Sprintf("h%d-%s", i, suffix),
			NS:   fmt.Sprintf("scvt-%s-h%d", suffix, i),
			Addr: fmt.Sprintf("%s.%d", subnet, 10+i),
			Veth: fmt.Sprintf("scvt%sh%d", suffix, i),
		}
		tn.Hosts = append(tn.Hosts, h)
		if i > 1 {
			tn.ip("netns", "add", h.NS)
		}
		var st unix.Stat_t
		if err := unix.Stat("/run/netns/"+h.NS, &st); err != nil {
			t.Fatalf("testnet: stat namespace %s: %v", h.NS, err)
		}
		h.nsIno = st.Ino
		tn.ip("link", "add", h.Veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		tn.ip("link", "set", h.Veth, "master", tn.Bridge)
		tn.ip("link", "set", h.Veth, "up")
		tn.ip("-n", h.NS, "addr", "add", h.Addr+"/24", "dev", "eth0")
		tn.ip("-n", h.NS, "link", "set", "eth0", "up")
		tn.ip("-n", h.NS, "link", "set", "lo", "up")
	}
	tn.startSSHDs()
	return tn
}

// Inventory returns the hosts as ssh launcher inventory lines
// ("root@ADDR:22 slots=N", see launchers/ssh.ParseHost).
func (tn *Net) Inventory(slots int) []string {
	var out []string
	for _, h := range tn.Hosts {
		out = append(out, fmt.Sprintf("root@%s:%d slots=%d", h.Addr, SSHPort, slots))
	}
	return out
}

// LinkDown cuts host i (0-based) off the bridge: nothing reaches it and it
// reaches nothing, as when a machine's network dies.
func (tn *Net) LinkDown(i int) error { return tn.link(i, "down") }

// LinkUp brings host i back.
func (tn *Net) LinkUp(i int) error { return tn.link(i, "up") }

func (tn *Net) link(i int, state string) error {
	if out, err := exec.Command("ip", "link", "set", tn.Hosts[i].Veth, state).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set %s %s: %v: %s", tn.Hosts[i].Veth, state, err, bytes.TrimSpace(out))
	}
	return nil
}

// Proc is a process running in a host's network namespace.
type Proc struct {
	PID   int
	PPID  int
	Comm  string
	State string   // the state letter of /proc/PID/stat (Z: a zombie)
	Env   []string // KEY=VALUE
}

// Getenv returns the value of key in p's environment.
func (p Proc) Getenv(key string) string {
	for _, kv := range p.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func (p Proc) String() string { return fmt.Sprintf("%d(%s,%s)", p.PID, p.Comm, p.State) }

// Procs lists the processes in host i's network namespace, sshd included.
func (tn *Net) Procs(i int) []Proc {
	return procsIn(tn.Hosts[i].nsIno)
}

func procsIn(ino uint64) []Proc {
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []Proc
	for _, d := range dirs {
		if l, err := os.Readlink(d + "/ns/net"); err != nil || l != want {
			continue
		}
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			continue
		}
		p := Proc{Comm: s[open+1 : end], State: f[0]}
		p.PID, _ = strconv.Atoi(strings.TrimSpace(s[:open]))
		p.PPID, _ = strconv.Atoi(f[1])
		if env, err := os.ReadFile(d + "/environ"); err == nil {
			for kv := range strings.SplitSeq(string(env), "\x00") {
				if kv != "" {
					p.Env = append(p.Env, kv)
				}
			}
		}
		out = append(out, p)
	}
	return out
}

// pickSubnet returns "10.X.Y" for a /24 that no route of this machine overlaps.
func (tn *Net) pickSubnet() string {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		tn.t.Fatalf("testnet: ip route: %v", err)
	}
	var routes []*net.IPNet
	for line := range strings.Lines(string(out)) {
		for _, f := range strings.Fields(line) {
			if !strings.Contains(f, "/") {
				f += "/32"
			}
			if _, n, err := net.ParseCIDR(f); err == nil {
				if ones, _ := n.Mask.Size(); ones > 0 { // not "default"
					routes = append(routes, n)
				}
				break
			}
		}
	}
	for range 100 {
		x, y := 160+randInt(tn.t, 64), randInt(tn.t, 256)
		_, mine, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", x, y))
		free := true
		for _, r := range routes {
			if r.Contains(mine.IP) || mine.Contains(r.IP) {
				free = false
				break
			}
		}
		if free {
			return fmt.Sprintf("10.%d.%d", x, y)
		}
	}
	tn.t.Fatal("testnet: no free /24 in 10.160-223.x.0")
	return ""
}

func (tn *Net) ip(args ...string) {
	tn.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		tn.t.Fatalf("testnet: ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// startSSHDs writes the keys and a config per host and starts each sshd in
// its namespace under its own hostname: ip netns exec and unshare exec, and
// sh execs sshd, so the child's PID is sshd's.
func (tn *Net) startSSHDs() {
	t := tn.t
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	hostPub := WriteKey(t, filepath.Join(tn.Dir, "hostkey"))
	tn.KeyFile = filepath.Join(tn.Dir, "id_ed25519")
	clientPub := WriteKey(t, tn.KeyFile)
	if err := os.WriteFile(filepath.Join(tn.Dir, "authorized_keys"), gossh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, h := range tn.Hosts {
		addrs = append(addrs, net.JoinHostPort(h.Addr, strconv.Itoa(SSHPort)))
	}
	tn.KnownHosts = filepath.Join(tn.Dir, "known_hosts")
	if err := os.WriteFile(tn.KnownHosts, []byte(knownhosts.Line(addrs, hostPub)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range tn.Hosts {
		cfg := fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %[3]s/hostkey
PidFile %[3]s/sshd-%[4]s.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile %[3]s/authorized_keys
StrictModes no
AcceptEnv SCAV_*
# bash sources ~/.bashrc for commands run by sshd unless SHLVL says it is
# not a top-level shell: keep this machine's login files out of the tests.
SetEnv SHLVL=1
MaxStartups 100:30:200
MaxSessions 50
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
ClientAliveInterval 1
ClientAliveCountMax 3
`, SSHPort, h.Addr, tn.Dir, h.Name)
		cfgFile := filepath.Join(tn.Dir, "sshd-"+h.Name+".conf")
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		h.log = &lockedBuffer{}
		cmd := exec.Command("ip", "netns", "exec", h.NS, "unshare", "--uts", "/bin/sh", "-c",
			`hostname "$0" && exec `+sshdPath+` -D -e -f "$1"`, h.Name, cfgFile)
		cmd.Stdout, cmd.Stderr = h.log, h.log
		if err := cmd.Start(); err != nil {
			t.Fatalf("testnet: start sshd on %s: %v", h.Name, err)
		}
		h.sshd = cmd
	}
	for _, h := range tn.Hosts {
		addr := net.JoinHostPort(h.Addr, strconv.Itoa(SSHPort))
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testnet: sshd of %s does not listen on %s: %v\n%s", h.Name, addr, err, h.log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// cleanup is registered by New; see the package comment.
func (tn *Net) cleanup() {
	t := tn.t
	me := os.Getpid()
	for i := range tn.Hosts {
		_ = tn.LinkUp(i) // a host left down would keep its sessions waiting
	}
	// Every process but sshd's listener should end on its own.
	for _, h := range tn.Hosts {
		if h.nsIno == 0 {
			continue
		}
		listener := 0
		if h.sshd != nil {
			listener = h.sshd.Process.Pid
		}
		left := settle(h.nsIno, me, listener, tn.settle)
		if len(left) > 0 {
			t.Errorf("testnet: processes left on %s: %v", h.Name, left)
			for _, p := range left {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
			if left := settleGone(left, me, tn.settle); len(left) > 0 {
				t.Errorf("testnet: processes on %s still there after SIGKILL: %v", h.Name, left)
			}
		}
		if h.sshd != nil {
			_ = h.sshd.Process.Signal(syscall.SIGTERM)
			_ = h.sshd.Wait() // reaps it
			if t.Failed() {
				t.Logf("testnet: sshd log of %s:\n%s", h.Name, h.log.String())
			}
		}
		if left := settle(h.nsIno, me, 0, tn.settle); len(left) > 0 {
			t.Errorf("testnet: processes still on %s after SIGKILL and sshd's end: %v", h.Name, left)
		}
	}
	var errs []string
	for _, h := range tn.Hosts {
		// Deleting the bridge side deletes the pair at once; the namespace
		// would only take its eth0 along later, asynchronously.
		_ = exec.Command("ip", "link", "del", h.Veth).Run()
		if out, err := exec.Command("ip", "netns", "del", h.NS).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("ip netns del %s: %v: %s", h.NS, err, bytes.TrimSpace(out)))
		}
	}
	if len(tn.Hosts) == 0 { // New failed before the first Host: its namespace is there
		_ = exec.Command("ip", "netns", "del", "scvt-"+tn.suffix+"-h1").Run()
	}
	_ = exec.Command("ip", "link", "del", tn.Bridge).Run()
	// Check that nothing remains.
	if err := exec.Command("ip", "link", "show", tn.Bridge).Run(); err == nil {
		errs = append(errs, "bridge "+tn.Bridge+" still exists")
	}
	for _, h := range tn.Hosts {
		if _, err := os.Stat("/run/netns/" + h.NS); !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, "namespace "+h.NS+" still exists")
		}
		if err := exec.Command("ip", "link", "show", h.Veth).Run(); err == nil {
			errs = append(errs, "link "+h.Veth+" still exists")
		}
	}
	if len(errs) > 0 {
		t.Errorf("testnet cleanup: %s", strings.Join(errs, "; "))
	}
}

// settle waits up to d for every process in the namespace but keep to be
// gone, and returns those left. A process that exits leaves the namespace
// at once (a zombie has none), so the processes seen are followed by PID:
// one that is a zombie child of the test process (me, their subreaper) is
// reaped here; a zombie of another parent is that parent's to reap.
func settle(ino uint64, me, keep int, d time.Duration) []Proc {
	deadline := time.Now().Add(d)
	seen := map[int]Proc{}
	for {
		for _, p := range procsIn(ino) {
			if p.PID != keep {
				seen[p.PID] = p
			}
		}
		var left []Proc
		for pid, p := range seen {
			state, ppid, ok := procState(pid)
			switch {
			case !ok:
				delete(seen, pid)
				continue
			case state == "Z" && ppid == me:
				var ws unix.WaitStatus
				if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid {
					delete(seen, pid)
					continue
				}
			case state == "Z":
				continue
			}
			p.State, p.PPID = state, ppid
			left = append(left, p)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procState reads the state letter and the parent of pid.
func procState(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

// settleGone waits up to d for the processes ps to be gone (reaping those
// that are zombie children of me) and returns those left.
func settleGone(ps []Proc, me int, d time.Duration) []Proc {
	deadline := time.Now().Add(d)
	for {
		var left []Proc
		for _, p := range ps {
			state, ppid, ok := procState(p.PID)
			if !ok || state == "Z" && ppid != me {
				continue
			}
			if state == "Z" {
				var ws unix.WaitStatus
				if got, _ := unix.Wait4(p.PID, &ws, unix.WNOHANG, nil); got == p.PID {
					continue
				}
			}
			left = append(left, p)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// WriteKey writes a new ed25519 private key in OpenSSH format and returns its public key.
func WriteKey(t testing.TB, path string) gossh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func randHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func randInt(t testing.TB, n int64) int {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		t.Fatal(err)
	}
	return int(v.Int64())
}

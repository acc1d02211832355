// Package testnet builds throwaway hosts for tests: Linux network
// namespaces on a private bridge, each with its own address, its own
// hostname (a UTS namespace) and its own sshd that accepts root with a key
// made for the test. The hosts share this machine's filesystem and process
// table; only the network and the hostname are theirs. They are
// internal/nsmachine machines that are not isolated (launchers/cloudvm's
// local provider makes isolated ones of the same machinery).
//
// It needs root, iproute2, unshare and /usr/sbin/sshd; New skips the test
// when any is missing or a namespace cannot be made (a container without
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
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/internal/sshkey"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
)

// SSHPort is the port every host's sshd listens on (in its own namespace).
const SSHPort = nsmachine.SSHPort

// settleTimeout bounds waiting for the processes in a namespace to end at
// cleanup; sshd sessions whose client vanished end within about 4 s
// (ClientAliveInterval 1, ClientAliveCountMax 3).
const settleTimeout = 8 * time.Second

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

	nsIno   uint64
	machine *nsmachine.Machine // its init is its sshd
	log     string
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
	bridge nsmachine.Bridge
	settle time.Duration // settleTimeout; shorter in this package's tests
}

// New makes n hosts (see the package comment) and registers their cleanup
// with t. It skips the test when the machine cannot make them.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if err := nsmachine.Check(false); err != nil {
		t.Skipf("SKIP: testnet: %v", err)
	}
	if err := subreaper.Become(); err != nil {
		t.Fatalf("testnet: become subreaper: %v", err)
	}
	suffix := strings.ToLower(rand.Text()[:5])
	tn := &Net{t: t, suffix: suffix, settle: settleTimeout, Dir: t.TempDir(), Bridge: "scvt" + suffix + "br"}
	ctx := context.Background()
	// A first namespace tells whether namespaces can be made here at all.
	probe := "scvt-" + suffix + "-probe"
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("SKIP: testnet: ip netns add failed (no CAP_SYS_ADMIN?): %v: %s", err, bytes.TrimSpace(out))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	br, err := nsmachine.CreateBridge(ctx, tn.Bridge)
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	tn.bridge, tn.BridgeAddr = br, br.Addr()
	t.Cleanup(tn.cleanup)
	tn.writeKeys(n)
	for i := 1; i <= n; i++ {
		h := &Host{
			Name: fmt.Sprintf("h%d-%s", i, suffix),
			NS:   fmt.Sprintf("scvt-%s-h%d", suffix, i),
			Addr: br.HostAddr(i + 1),
			Veth: fmt.Sprintf("scvt%sh%d", suffix, i),
		}
		tn.Hosts = append(tn.Hosts, h)
		tn.startHost(ctx, h)
	}
	tn.waitSSHDs()
	return tn
}

// writeKeys writes the host key, the client key and the known_hosts file.
func (tn *Net) writeKeys(n int) {
	t := tn.t
	hostPub, err := sshkey.Write(filepath.Join(tn.Dir, "hostkey"))
	if err != nil {
		t.Fatal(err)
	}
	tn.KeyFile = filepath.Join(tn.Dir, "id_ed25519")
	clientPub, err := sshkey.Write(tn.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tn.Dir, "authorized_keys"), gossh.MarshalAuthorizedKey(clientPub), 0o644); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i := 1; i <= n; i++ {
		addrs = append(addrs, net.JoinHostPort(tn.bridge.HostAddr(i+1), strconv.Itoa(SSHPort)))
	}
	tn.KnownHosts = filepath.Join(tn.Dir, "known_hosts")
	if err := os.WriteFile(tn.KnownHosts, []byte(knownhosts.Line(addrs, hostPub)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startHost starts h as a machine whose init is its sshd.
func (tn *Net) startHost(ctx context.Context, h *Host) {
	t := tn.t
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := nsmachine.SSHD{Addr: h.Addr, HostKey: filepath.Join(tn.Dir, "hostkey"), AuthorizedKeys: filepath.Join(tn.Dir, "authorized_keys"),
		PidFile: filepath.Join(tn.Dir, "sshd-"+h.Name+".pid")}
	cfgFile := filepath.Join(tn.Dir, "sshd-"+h.Name+".conf")
	if err := os.WriteFile(cfgFile, []byte(cfg.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	h.log = filepath.Join(tn.Dir, "sshd-"+h.Name+".log")
	m, err := nsmachine.Start(ctx, nsmachine.Spec{Name: h.Name, NetNS: h.NS, Veth: h.Veth, Bridge: tn.bridge, Addr: h.Addr,
		Init: nsmachine.SSHDInit(cfgFile), Log: h.log})
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	h.machine = m
	if h.nsIno, err = nsmachine.NetNSInode(h.NS); err != nil {
		t.Fatalf("testnet: %v", err)
	}
}

// waitSSHDs waits until every host's sshd listens.
func (tn *Net) waitSSHDs() {
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
				tn.t.Fatalf("testnet: sshd of %s does not listen on %s: %v\n%s", h.Name, addr, err, h.sshdLog())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (h *Host) sshdLog() string {
	b, _ := os.ReadFile(h.log)
	return string(b)
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
	return nsmachine.IP(context.Background(), "link", "set", tn.Hosts[i].Veth, state)
}

// Command returns a command that runs path on host i: in its network and
// UTS namespaces (its address, its hostname), through nsenter, which execs
// path so that the command's PID is path's.
func (tn *Net) Command(i int, path string, args ...string) *exec.Cmd {
	h := tn.Hosts[i]
	return exec.Command("nsenter", append([]string{"--target", strconv.Itoa(h.machine.PID), "--net", "--uts", "--", path}, args...)...)
}

// Freeze stops (SIGSTOP) every process on host i, its sshd included, until
// none runs; with LinkDown it makes the host lost entirely: the hosts share
// this machine's filesystem and unix sockets, which a host whose network is
// cut would not reach. Thaw undoes it; the cleanup thaws every host.
func (tn *Net) Freeze(i int) error { return tn.signalAll(i, syscall.SIGSTOP) }

// Thaw continues (SIGCONT) every process on host i.
func (tn *Net) Thaw(i int) error { return tn.signalAll(i, syscall.SIGCONT) }

// signalAll sends sig to every process on host i until each is stopped
// (SIGSTOP) or none is (SIGCONT): a process forked meanwhile gets it too.
// A process in uninterruptible sleep (D) that was sent SIGSTOP counts as
// stopped: it stops as its system call returns, and on a loaded machine
// that can take longer than the wait here.
func (tn *Net) signalAll(i int, sig syscall.Signal) error {
	stop := sig == syscall.SIGSTOP
	sent := map[int]bool{}
	want := func(p Proc) bool {
		if stop && p.State == "D" && sent[p.PID] {
			return true
		}
		return (p.State == "T") == stop
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		done := true
		for _, p := range tn.Procs(i) {
			if p.State == "Z" || want(p) {
				continue
			}
			done = false
			_ = syscall.Kill(p.PID, sig)
			sent[p.PID] = true
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s the processes of %s: some do not follow: %v", unix.SignalName(sig), tn.Hosts[i].Name, tn.Procs(i))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Proc is a process running in a host's network namespace.
type Proc = nsmachine.Proc

// Procs lists the processes in host i's network namespace, sshd included.
func (tn *Net) Procs(i int) []Proc {
	return nsmachine.ProcsInNet(tn.Hosts[i].nsIno)
}

// cleanup is registered by New; see the package comment.
func (tn *Net) cleanup() {
	t := tn.t
	for i := range tn.Hosts {
		_ = tn.Thaw(i)
		_ = tn.LinkUp(i) // a host left down would keep its sessions waiting
	}
	// Every process but sshd's listener should end on its own.
	for _, h := range tn.Hosts {
		if h.machine == nil {
			continue
		}
		left := nsmachine.Settle(h.nsIno, h.machine.PID, tn.settle)
		if len(left) > 0 {
			t.Errorf("testnet: processes left on %s: %v", h.Name, left)
			for _, p := range left {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
			if left := nsmachine.SettleGone(left, tn.settle); len(left) > 0 {
				t.Errorf("testnet: processes on %s still there after SIGKILL: %v", h.Name, left)
			}
		}
	}
	var errs []string
	for _, h := range tn.Hosts {
		if h.machine == nil {
			continue
		}
		if err := h.machine.Terminate(context.Background()); err != nil {
			errs = append(errs, err.Error())
		}
		if t.Failed() {
			t.Logf("testnet: sshd log of %s:\n%s", h.Name, h.sshdLog())
		}
		if left := h.machine.Gone(); len(left) > 0 {
			errs = append(errs, fmt.Sprintf("%s: %v", h.Name, left))
		}
	}
	if err := tn.bridge.Delete(context.Background()); err != nil {
		errs = append(errs, err.Error())
	}
	if tn.bridge.Exists() {
		errs = append(errs, "bridge "+tn.Bridge+" still exists")
	}
	if len(errs) > 0 {
		t.Errorf("testnet cleanup: %s", strings.Join(errs, "; "))
	}
}

// WriteKey writes a new ed25519 private key in OpenSSH format and returns its public key.
func WriteKey(t testing.TB, path string) gossh.PublicKey {
	t.Helper()
	pub, err := sshkey.Write(path)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

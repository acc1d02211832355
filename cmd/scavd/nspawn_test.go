package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
)

// The shipped units under a real systemd: a Debian rootfs (debootstrap,
// cached as a tarball under .cache/ so a run builds it once) booted by
// systemd-nspawn with systemd as its PID 1, commands run in it with nsenter
// (machinectl and systemd-run -M need a host systemd this machine may not
// have). See the research notes on this machine's systemd-nspawn.

// rootfsPackages are what the rootfs holds beyond minbase: systemd to boot,
// and what the local cloud's instances are made of (sshd, ip).
var rootfsPackages = []string{"systemd", "systemd-sysv", "dbus", "openssh-server", "iproute2"}

const rootfsSuite = "bookworm"

// rootfsTarball returns the cached rootfs tarball, building it with
// debootstrap when it is missing (a few minutes, once: the name carries the
// suite and packages, so a change builds a new one).
func rootfsTarball(t *testing.T) string {
	t.Helper()
	sum := sha256.Sum256([]byte(rootfsSuite + " " + strings.Join(rootfsPackages, ",")))
	cache, err := filepath.Abs(filepath.Join("..", "..", ".cache"))
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(cache, fmt.Sprintf("systemd-rootfs-%s-%s.tar", rootfsSuite, hex.EncodeToString(sum[:4])))
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skipf("no cached rootfs (%s) and no debootstrap to build one (apt-get install -y debootstrap systemd-container)", tarball)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cache, "rootfs-build")
	_ = os.RemoveAll(root)
	defer os.RemoveAll(root)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	t.Logf("building the rootfs with debootstrap (once; cached as %s)", tarball)
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(rootfsPackages, ","),
		rootfsSuite, root, debianMirror()).CombinedOutput()
	if err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, tail(out, 3000))
	}
	_ = os.RemoveAll(filepath.Join(root, "var", "lib", "apt", "lists"))
	tmp := tarball + ".tmp"
	if out, err := exec.CommandContext(ctx, "tar", "-C", root, "-cf", tmp, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar the rootfs: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	return tarball
}

// debianMirror is the mirror apt's sources name (deb.debian.org otherwise).
func debianMirror() string {
	for _, f := range []string{"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n") {
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "URIs: "); ok && !strings.Contains(u, "security") {
				return strings.Fields(u)[0]
			}
			if f := strings.Fields(line); len(f) >= 3 && f[0] == "deb" && !strings.Contains(f[1], "security") {
				return f[1]
			}
		}
	}
	return "http://deb.debian.org/debian"
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// machine is a booted container.
type machine struct {
	t      *testing.T
	root   string
	nspawn *exec.Cmd
	leader int // the container's PID 1, as this machine sees it
	log    bytes.Buffer
}

// bootMachine extracts the rootfs, lets prepare install into it, and boots
// it with systemd as PID 1 and a network of its own; the test's cleanup
// powers it off.
func bootMachine(t *testing.T, prepare func(root string)) *machine {
	t.Helper()
	tarball := rootfsTarball(t)
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-C", root, "-xf", tarball).CombinedOutput(); err != nil {
		t.Fatalf("extract the rootfs: %v\n%s", err, out)
	}
	// A host has an /etc/hosts (the local cloud's machines mount theirs
	// over it); debootstrap leaves none.
	if err := os.WriteFile(filepath.Join(root, "etc", "hosts"), []byte("127.0.0.1 localhost\n::1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prepare(root)
	m := &machine{t: t, root: root}
	name := fmt.Sprintf("scavtest%d", os.Getpid()%100000)
	m.nspawn = exec.Command("systemd-nspawn", "-D", root, "-b", "--console=pipe", "--register=no", "--keep-unit",
		"-M", name, "--private-network")
	m.nspawn.Stdout, m.nspawn.Stderr = &m.log, &m.log
	if err := m.nspawn.Start(); err != nil {
		t.Fatalf("systemd-nspawn: %v", err)
	}
	t.Cleanup(m.poweroff)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", m.nspawn.Process.Pid, m.nspawn.Process.Pid)); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				m.leader, _ = strconv.Atoi(f[0])
			}
		}
		if m.leader > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/systemd/private", m.leader)); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not boot within 30s:\n%s", tail(m.log.Bytes(), 3000))
		}
	}
	if out, _ := m.run(40*time.Second, "systemctl", "is-system-running", "--wait"); out != "running" {
		failed, _ := m.run(10*time.Second, "systemctl", "--failed", "--no-legend")
		t.Logf("the container's systemd is %q; failed units: %s", out, failed)
	}
	return m
}

// run runs a command in the container (all its namespaces, as root) and
// returns its output, trimmed.
func (m *machine) run(d time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(m.leader), "-a", "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// must is run that fails the test unless the command exits 0.
func (m *machine) must(d time.Duration, args ...string) string {
	m.t.Helper()
	out, err := m.run(d, args...)
	if err != nil {
		m.t.Fatalf("in the container: %q: %v\n%s\n%s", args, err, out, m.journal("scavd"))
	}
	return out
}

// journal is the end of a unit's journal, for failure messages.
func (m *machine) journal(unit string) string {
	out, _ := m.run(10*time.Second, "journalctl", "-u", unit, "--no-pager", "-n", "40")
	return out
}

// show is a property of a unit.
func (m *machine) show(unit, prop string) string {
	out, _ := m.run(10*time.Second, "systemctl", "show", "-p", prop, "--value", unit)
	return out
}

// poweroff stops the container, and kills it if it does not stop.
func (m *machine) poweroff() {
	if m.nspawn.ProcessState != nil {
		return
	}
	_, _ = m.run(15*time.Second, "systemctl", "poweroff")
	done := make(chan struct{})
	go func() { _ = m.nspawn.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		m.t.Errorf("the container did not power off within 30s; killing it")
		_ = m.nspawn.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// install copies src into the container's root at path with mode.
func install(t *testing.T, src, root, path string, mode os.FileMode, r *strings.Replacer) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if r != nil {
		b = []byte(r.Replace(string(b)))
	}
	dst := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// scavctlBinary builds scavctl once, beside scavd.
func scavctlBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(scavdBinary(t)), "scavctl")
	if _, err := os.Stat(bin); err != nil {
		if out, err := exec.Command("go", "build", "-o", bin, "../scavctl").CombinedOutput(); err != nil {
			t.Fatalf("build scavctl: %v\n%s", err, out)
		}
	}
	return bin
}

// verifyUnit runs systemd-analyze verify on unit (with drop-ins, if any),
// ExecStart pointed at the freshly built scavd, and wants no word from it.
func verifyUnit(t *testing.T, unit string, dropIns ...string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	bin := strings.NewReplacer("/usr/local/bin/scavd ", scavdBinary(t)+" ")
	install(t, unit, dir, filepath.Base(unit), 0o644, bin)
	for _, d := range dropIns {
		install(t, d, dir, filepath.Base(unit)+".d/"+filepath.Base(d), 0o644, bin)
	}
	cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(dir, filepath.Base(unit)))
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s %v: %v\n%s", unit, dropIns, err, out)
	}
}

// TestSystemdForReal boots a Debian with systemd as PID 1 and runs the
// shipped unit in it: scavd comes up active with its notify status; its
// sandbox allows what it needs (its state directory, its sockets, a job's
// workers as their owner, in a checkpoint directory of theirs) and no more
// (its capabilities, read-only /usr and kernel tunables, for scavd and its
// jobs alike); a hung scavd (SIGSTOP) is killed by the watchdog and
// restarted; and with the local cloud's drop-in it runs a job on a
// local-cloud instance. systemd-analyze verify says nothing of either.
func TestSystemdForReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("systemd-nspawn needs root")
	}
	for _, tool := range []string{"systemd-nspawn", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install -y systemd-container debootstrap)", tool)
		}
	}
	deploy := filepath.Join("..", "..", "deploy")
	unit := filepath.Join(deploy, "systemd", "scavd.service")
	cloud := filepath.Join(deploy, "systemd", "scavd.service.d", "local-cloud.conf")
	verifyUnit(t, unit)
	verifyUnit(t, unit, cloud)

	scavd, scavctl := scavdBinary(t), scavctlBinary(t)
	m := bootMachine(t, func(root string) {
		install(t, scavd, root, "usr/local/bin/scavd", 0o755, nil)
		install(t, scavctl, root, "usr/local/bin/scavctl", 0o755, nil)
		install(t, unit, root, "etc/systemd/system/scavd.service", 0o644, nil)
		install(t, filepath.Join(deploy, "scavd.yaml"), root, "etc/scavenger/scavd.yaml", 0o644, nil)
	})

	// Up, and saying so.
	m.must(60*time.Second, "systemctl", "enable", "--now", "scavd")
	if st := m.show("scavd", "ActiveState"); st != "active" {
		t.Fatalf("scavd is %s, want active\n%s", st, m.journal("scavd"))
	}
	if status := m.show("scavd", "StatusText"); !strings.Contains(status, "jobs running") && !strings.Contains(status, "no jobs") {
		t.Errorf("scavd's status %q: want its notify STATUS= line", status)
	}

	// What it needs: its state directory, traversable, not listable, with
	// its sockets; a user's job runs as that user, in a checkpoint
	// directory of theirs.
	if mode := m.must(10*time.Second, "stat", "-c", "%a %U", "/var/lib/scavenger"); mode != "711 root" {
		t.Errorf("/var/lib/scavenger is %q, want 711 root", mode)
	}
	m.must(10*time.Second, "test", "-S", "/var/lib/scavenger/api.sock")
	m.must(10*time.Second, "useradd", "-m", "alice")
	out := m.must(60*time.Second, "runuser", "-u", "alice", "--", "sh", "-c",
		`cd ~ && scavctl run -- /bin/sh -c 'id -un; echo kept > "$SCAV_CHECKPOINT_DIR/ckpt"; stat -c "dir %U" "$SCAV_CHECKPOINT_DIR"; ls /var/lib/scavenger >/dev/null 2>&1 || echo "state not listable"'`)
	for _, want := range []string{"[0] alice", "[0] dir alice", "[0] state not listable"} {
		if !strings.Contains(out, want) {
			t.Errorf("alice's job printed:\n%s\nwant %q", out, want)
		}
	}

	// And no more: its bounding set, read-only /usr and kernel tunables,
	// no new privileges, for scavd and for a job root submits.
	pid := m.show("scavd", "MainPID")
	status := m.must(10*time.Second, "cat", "/proc/"+pid+"/status")
	const caps = "00000000000000e5" // CHOWN, DAC_READ_SEARCH, KILL, SETGID, SETUID
	for _, want := range []string{"CapBnd:\t" + caps, "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("scavd's status lacks %q:\n%s", want, status)
		}
	}
	out = m.must(60*time.Second, "sh", "-c", `cd /root && scavctl run -- /bin/sh -c 'grep CapBnd /proc/self/status; touch /usr/bin/x 2>/dev/null || echo "usr read-only"; echo 1 2>/dev/null >/proc/sys/vm/overcommit_memory || echo "tunables read-only"'`)
	for _, want := range []string{"CapBnd:\t" + caps, "usr read-only", "tunables read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("root's job printed:\n%s\nwant %q", out, want)
		}
	}

	// A hung scavd is killed by the watchdog and restarted (a shorter
	// watchdog than the unit's 30 s, so that the test is quick).
	m.dropIn("zz-test-watchdog.conf", "[Service]\nWatchdogSec=4s\nRestartSec=1s\n")
	m.must(60*time.Second, "systemctl", "restart", "scavd")
	hung := m.show("scavd", "MainPID")
	m.must(10*time.Second, "kill", "-STOP", hung)
	for deadline := time.Now().Add(40 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if pid := m.show("scavd", "MainPID"); pid != hung && pid != "0" && m.show("scavd", "ActiveState") == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scavd (pid %s) stopped with SIGSTOP was not restarted within 40s: %s\n%s", hung, m.show("scavd", "ActiveState"), m.journal("scavd"))
		}
	}
	if j, _ := m.run(10*time.Second, "journalctl", "-u", "scavd", "--no-pager", "-g", "watchdog"); !strings.Contains(j, "Failed with result 'watchdog'") || m.show("scavd", "NRestarts") == "0" {
		t.Errorf("the restart was not the watchdog's (NRestarts %s):\n%s", m.show("scavd", "NRestarts"), j)
	}

	// The local cloud's drop-in: scavd runs its jobs on instances of the
	// local cloud, made on this (container's) host.
	b, err := os.ReadFile(cloud)
	if err != nil {
		t.Fatal(err)
	}
	// systemd-nspawn mounts the cgroup-v1 hierarchies read-only in its
	// containers (a host's are read-write); the drop-in's
	// ProtectControlGroups=no is about the unit's, so open the container's.
	for _, h := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/freezer"} {
		if out, err := exec.Command("nsenter", "-t", strconv.Itoa(m.leader), "-m", "mount", "-o", "remount,rw,bind", h).CombinedOutput(); err != nil {
			t.Fatalf("remount %s read-write in the container: %v\n%s", h, err, out)
		}
	}
	m.dropIn("local-cloud.conf", string(b))
	m.must(60*time.Second, "systemctl", "restart", "scavd")
	t.Cleanup(func() { m.removeCloudCgroups() })
	out, err = m.run(3*time.Minute, "sh", "-c", `cd /root && scavctl run --launcher cloudvm -- /bin/sh -c 'echo "on $(hostname)"'`)
	if err != nil || !strings.Contains(out, "[0] on i-") {
		t.Fatalf("a job on the local cloud: %v\n%s\n%s", err, out, m.journal("scavd"))
	}
	t.Logf("local cloud job:\n%s", out)
}

// removeCloudCgroups stops scavd and removes the cgroups of the container's
// local cloud: the container shares this machine's cgroup-v1 hierarchies,
// and a cloud's parent cgroup outlives its instances (the job's end
// terminated them: none may be left).
func (m *machine) removeCloudCgroups() {
	m.t.Helper()
	_, _ = m.run(60*time.Second, "systemctl", "stop", "scavd")
	dir := filepath.Join(m.root, "var", "lib", "scavenger", "cloud", "localcloud")
	recs, err := localcloud.ReadRecords(dir)
	if err != nil {
		m.t.Errorf("the local cloud's records: %v", err)
	}
	for _, r := range recs {
		if r.Alive() {
			m.t.Errorf("instance %s is still %s after its job ended", r.ID, r.State)
		}
	}
	var st struct {
		ID string `json:"id"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cloud.json")); err != nil || json.Unmarshal(b, &st) != nil || st.ID == "" {
		m.t.Errorf("the local cloud's cloud.json: %v %s", err, b)
		return
	}
	if err := nsmachine.RemoveCgroup("scavenger-" + st.ID); err != nil {
		m.t.Errorf("remove the local cloud's cgroups: %v", err)
	}
}

// dropIn writes a drop-in of scavd.service into the container and reloads.
func (m *machine) dropIn(name, text string) {
	m.t.Helper()
	dir := filepath.Join(m.root, "etc", "systemd", "system", "scavd.service.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		m.t.Fatal(err)
	}
	m.must(30*time.Second, "systemctl", "daemon-reload")
}

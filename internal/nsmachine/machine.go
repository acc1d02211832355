package nsmachine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec describes a machine to start.
type Spec struct {
	// Name is the machine's hostname.
	Name string `json:"name"`
	// NetNS names its network namespace (/run/netns/NetNS).
	NetNS string `json:"netns"`
	// Veth is the bridge side of its link; its side is eth0.
	Veth string `json:"veth"`
	// Bridge is the bridge it is plugged into; Addr its address there.
	Bridge Bridge `json:"bridge"`
	Addr   string `json:"addr"`
	// Isolate gives it its own PID, mount and IPC namespaces, a private
	// local disk and cgroup limits (see the package comment).
	Isolate bool `json:"isolate,omitempty"`
	// CPUs is its CPU quota in CPUs (0: none); MemoryBytes its memory limit
	// (0: none); DiskBytes the size of its local disk at /mnt (0: 256 MiB).
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	// Cgroup is its cgroup, relative to each controller's root
	// ("scavenger-x/i-1"); required when isolated.
	Cgroup string `json:"cgroup,omitempty"`
	// Init is the command that becomes its init once it is set up (exec'd:
	// it keeps the PID), e.g. sshd -D -e -f CONFIG.
	Init []string `json:"init"`
	// Log receives the init's output (appended; empty: discarded).
	Log string `json:"log,omitempty"`
}

// Machine is a started machine. It holds what Terminate needs, and can be
// saved (JSON) and terminated by another process later.
type Machine struct {
	Spec Spec `json:"spec"`
	// PID is its init's PID in this namespace; Started the init's start
	// time in clock ticks since boot, which tells a reused PID apart.
	PID     int    `json:"pid"`
	Started uint64 `json:"started"`
}

// LocalTmp is the temporary directory on an isolated machine's local disk
// (for its TMPDIR: what is made there goes with the machine).
const LocalTmp = "/mnt/tmp"

// defaultDisk is the local disk of an isolated machine that names none.
const defaultDisk = 256 << 20

// initScript waits for the go-ahead on stdin (sent once the network and
// the cgroups are set up), sets up the machine's own mounts and hostname,
// and execs the init command ("$@").
const initScript = `read -r go || exit 97
if [ -n "$SCAV_NS_ISOLATE" ]; then
  mount --make-rprivate / &&
  mount -t proc proc /proc &&
  mount -t tmpfs -o "size=$SCAV_NS_DISK,mode=0755" localdisk /mnt &&
  mkdir -m 1777 /mnt/tmp &&
  mount -t tmpfs -o size=64m,mode=1777 shm /dev/shm || exit 98
  # The machine's name resolves to its address (as on a cloud's machine).
  { cat /etc/hosts; echo "$SCAV_NS_ADDR $SCAV_NS_NAME"; } >/dev/shm/.hosts &&
  mount --bind /dev/shm/.hosts /etc/hosts || exit 98
fi
hostname "$SCAV_NS_NAME" || exit 99
unset SCAV_NS_ISOLATE SCAV_NS_DISK SCAV_NS_NAME SCAV_NS_ADDR
exec "$@"`

// Start starts a machine: its namespaces with the init command waiting,
// its cgroups (isolated), its veth on the bridge with its address, the
// name of its network namespace; then lets the init go. It returns once
// the init runs; whatever the init serves (sshd) may take a moment more.
// On failure nothing is left.
func Start(ctx context.Context, s Spec) (*Machine, error) {
	if len(s.Init) == 0 || s.Name == "" || s.NetNS == "" || s.Veth == "" || s.Addr == "" {
		return nil, fmt.Errorf("start machine %s: incomplete spec %+v", s.Name, s)
	}
	if s.Isolate && s.DiskBytes <= 0 {
		s.DiskBytes = defaultDisk
	}
	m := &Machine{Spec: s}
	if err := m.start(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if terr := m.Terminate(cctx); terr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", terr))
		}
		return nil, fmt.Errorf("start machine %s: %w", s.Name, err)
	}
	return m, nil
}

func (m *Machine) start(ctx context.Context) error {
	s := m.Spec
	if s.Isolate {
		if err := makeCgroups(s.Cgroup, s.CPUs, s.MemoryBytes); err != nil {
			return err
		}
	}
	log, err := openLog(s.Log)
	if err != nil {
		return err
	}
	defer log.Close()
	goR, goW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer goW.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", initScript, "init"}, s.Init...)...)
	cmd.Env = append(os.Environ(), "SCAV_NS_NAME="+s.Name, "SCAV_NS_ADDR="+s.Addr)
	flags := uintptr(unix.CLONE_NEWNET | unix.CLONE_NEWUTS)
	if s.Isolate {
		flags |= unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC
		cmd.Env = append(cmd.Env, "SCAV_NS_ISOLATE=1", "SCAV_NS_DISK="+strconv.FormatInt(s.DiskBytes, 10))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Setsid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = goR, log, log
	err = cmd.Start()
	goR.Close()
	if err != nil {
		return fmt.Errorf("start init: %w", err)
	}
	m.PID = cmd.Process.Pid
	m.Started = startTime(m.PID)
	_ = cmd.Process.Release() // Terminate reaps it by PID, possibly from another process
	if s.Isolate {
		if err := joinCgroups(s.Cgroup, m.PID); err != nil {
			return err
		}
	}
	if err := m.plug(ctx); err != nil {
		return err
	}
	if _, err := goW.Write([]byte("go\n")); err != nil {
		return fmt.Errorf("release init: %w", err)
	}
	return nil
}

// plug makes the machine's veth pair, names its network namespace and
// gives it its address.
func (m *Machine) plug(ctx context.Context) error {
	s := m.Spec
	host := fmt.Sprintf("link add %s type veth peer name eth0 netns %d\nlink set %s master %s\nlink set %s up\nnetns attach %s %d\n",
		s.Veth, m.PID, s.Veth, s.Bridge.Name, s.Veth, s.NetNS, m.PID)
	if err := ipBatch(ctx, nil, host); err != nil {
		return err
	}
	guest := fmt.Sprintf("addr add %s/24 dev eth0\nlink set eth0 up\nlink set lo up\n", s.Addr)
	return ipBatch(ctx, []string{"-n", s.NetNS}, guest)
}

// ipBatch runs ip with args and the commands in batch (one per line).
func ipBatch(ctx context.Context, args []string, batch string) error {
	cmd := exec.CommandContext(ctx, "ip", append(args, "-batch", "-")...)
	cmd.Stdin = strings.NewReader(batch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s -batch: %w: %s (commands: %q)", strings.Join(args, " "), err, strings.TrimSpace(string(out)), batch)
	}
	return nil
}

func openLog(path string) (*os.File, error) {
	if path == "" {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		return f, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open machine log: %w", err)
	}
	return f, nil
}

// Alive reports whether the machine's init still runs (not a zombie, and
// the same process that Start started).
func (m *Machine) Alive() bool {
	if m.PID <= 0 {
		return false
	}
	state, _, ok := ProcState(m.PID)
	return ok && state != "Z" && startTime(m.PID) == m.Started
}

// Procs lists the processes in the machine's network namespace.
func (m *Machine) Procs() []Proc {
	ino, err := NetNSInode(m.Spec.NetNS)
	if err != nil {
		return nil
	}
	return ProcsInNet(ino)
}

// settleTimeout bounds waiting for a terminated machine's processes.
const settleTimeout = 10 * time.Second

// Terminate ends the machine: every process of it is killed (its init,
// the PID namespace with it, and whatever is in its cgroup or network
// namespace), the init is reaped when it is this process's child, and its
// veth, namespace name and cgroups are removed. It is idempotent and works
// from another process than the one that started the machine (a PID that
// has been reused is left alone). The error says what could not be removed.
func (m *Machine) Terminate(ctx context.Context) error {
	// What is started here is finished even when ctx ends meanwhile: a
	// machine half removed is worse than a late answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*settleTimeout)
	defer cancel()
	s := m.Spec
	if m.PID > 0 && startTime(m.PID) == m.Started {
		_ = unix.Kill(m.PID, unix.SIGKILL)
	}
	if s.Isolate && s.Cgroup != "" {
		killCgroup(s.Cgroup)
	}
	var left []Proc
	if ino, err := NetNSInode(s.NetNS); err == nil {
		left = ProcsInNet(ino)
		for _, p := range left {
			_ = unix.Kill(p.PID, unix.SIGKILL)
		}
	}
	if m.PID > 0 && startTime(m.PID) == m.Started {
		left = append(left, Proc{PID: m.PID, Comm: "init"})
	}
	d := settleTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	var errs []error
	if rest := SettleGone(left, d); len(rest) > 0 {
		errs = append(errs, fmt.Errorf("processes still there after SIGKILL: %v", rest))
	}
	if s.Isolate && s.Cgroup != "" {
		if err := removeCgroups(s.Cgroup, d); err != nil {
			errs = append(errs, err)
		}
	}
	if LinkExists(s.Veth) {
		// Deleting the bridge side deletes the pair at once; the namespace
		// would only take its eth0 along later, asynchronously.
		if err := IP(ctx, "link", "del", s.Veth); err != nil && LinkExists(s.Veth) {
			errs = append(errs, err)
		}
	}
	// The next machine on this address has another MAC: forget this one's.
	_ = IP(ctx, "neigh", "flush", "to", s.Addr, "dev", s.Bridge.Name)
	if _, err := os.Stat("/run/netns/" + s.NetNS); err == nil {
		if err := IP(ctx, "netns", "del", s.NetNS); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("terminate machine %s: %w", s.Name, err)
	}
	return nil
}

// Gone reports what is left of a terminated machine: its namespace name,
// its veth, its cgroups, its init; empty when nothing is.
func (m *Machine) Gone() []string {
	var left []string
	if _, err := os.Stat("/run/netns/" + m.Spec.NetNS); err == nil {
		left = append(left, "namespace "+m.Spec.NetNS)
	}
	if LinkExists(m.Spec.Veth) {
		left = append(left, "link "+m.Spec.Veth)
	}
	if m.Spec.Isolate && CgroupExists(m.Spec.Cgroup) {
		left = append(left, "cgroup "+m.Spec.Cgroup)
	}
	if m.PID > 0 && startTime(m.PID) == m.Started {
		if state, _, _ := ProcState(m.PID); state != "Z" {
			left = append(left, fmt.Sprintf("init %d", m.PID))
		}
	}
	return left
}

// RemoveCgroup removes an (empty) cgroup rel from every controller: the
// parent the callers put their machines' cgroups in.
func RemoveCgroup(rel string) error { return removeCgroups(rel, time.Second) }

// Package localcloud is cloudvm's "local" provider, the local test and
// development cloud: one provider among others (aws, gce) behind
// launchers/builtin, whose instances are machines made of Linux namespaces
// on this host (internal/nsmachine), so that the whole cloud path — pools,
// failover, spot notices, billing, recovery — runs for real without an
// account. Nothing it sells is paid for.
//
// Each instance has its own address on the cloud's bridge, its own
// hostname, PID, mount and IPC namespaces, a private tmpfs as its local
// disk (/mnt) and sshd as its init; a cgroup CPU quota and memory limit
// make its type (loc.half: half a CPU, loc.full: one), sold on demand and
// spot at the prices of a machine catalog (price.Catalog, the schema every
// part of Scavenger reads machines from; DefaultCatalog). The host's other
// files are shared, as a network file system would be: the job's
// checkpoint directory outside the instances is the "bucket" every
// instance reads and writes.
//
// It keeps its state in a directory (Options.Dir): the bridge, and one
// record per instance with what terminating it needs, so that instances
// outlive the process that started them, as a cloud's do, and the next
// process on the directory lists and terminates them. One process at a
// time owns the directory (a lock).
//
// The cloud serves the instance metadata paths of AWS's IMDSv2, and those
// of GCE's metadata server that cloudvm reads (instance/preempted and
// maintenance-event), to its instances on the bridge (Metadata): instance-id, instance-type,
// placement/availability-zone, instance-life-cycle, and the spot notices
// spot/instance-action and events/recommendations/rebalance, which appear
// when an instance is interrupted (Interrupt; or through the admin socket,
// admin.sock in the directory, for another process). An interrupted
// instance is terminated when its notice runs out.
//
// An instance provisioned with an orphan timeout runs the watchdog
// (provider.WatchdogScript) beside sshd: it ends the instance once no SSH
// connection to it has been open for that long. The cloud notices an
// instance whose init ended (its watchdog, a crash) within a second and
// terminates what is left of it; WaitReady fails at once for one that died
// as it booted, naming its console's last lines.
//
// Every cloud registers itself in /run/scavenger/localclouds while it
// exists (cleanup.go): Cleanup, which Open runs and scavd --cloud-cleanup
// calls, destroys those no process has open any more — a killed test's at
// once, a stopped scavd's once it is stale.
//
// It needs root and what Check lists (nsmachine.Check: the tools, sshd's
// privilege separation directory, the cgroup controllers); Open names
// everything missing in one message, wrapping provider.ErrUnavailable.
package localcloud

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/jsonfile"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// Options configure a local cloud.
type Options struct {
	// Logger is required; the cloud names its logger "localcloud".
	Logger *zap.Logger
	// Dir holds the cloud's state (created when missing).
	Dir string
	// Catalog is what it sells (default DefaultCatalog(); see CheckCatalog).
	Catalog *price.Catalog
	// Ephemeral marks a cloud that is destroyed before its process ends
	// (a test's): Cleanup destroys it as soon as no process has it open.
	Ephemeral bool
	// StaleAfter: Open destroys the clouds of this host no process has
	// open that were last heard of more than StaleAfter ago, and the
	// ephemeral ones (default provider.DefaultOrphanTimeout; see Cleanup).
	StaleAfter time.Duration
}

// state is the cloud's own record, in Dir/cloud.json.
type state struct {
	ID       string           `json:"id"`
	Bridge   nsmachine.Bridge `json:"bridge"`
	IMDSPort int              `json:"imds_port"`
	// Next numbers the instances' links.
	Next int `json:"next"`
}

// Cloud is a local cloud. It implements provider.Provider.
type Cloud struct {
	o     Options
	log   *zap.Logger
	lock  *os.File
	mu    sync.Mutex
	st    state
	insts map[string]*instance // by id

	imds, admin *http.Server
	wake        chan struct{} // the interrupter re-reads the deadlines
	stop        context.CancelFunc
	wg          sync.WaitGroup
	closeOnce   sync.Once
}

var _ provider.Provider = (*Cloud)(nil)

// Open opens (or creates) the local cloud in opts.Dir: it takes the lock,
// brings the bridge back if it is gone, reads the instances and starts the
// metadata service and the admin socket. Close stops those; the instances
// go on.
func Open(ctx context.Context, opts Options) (*Cloud, error) {
	if opts.Logger == nil || opts.Dir == "" {
		return nil, errors.New("open local cloud: Options.Logger and Options.Dir are required")
	}
	if err := nsmachine.Check(true); err != nil {
		return nil, fmt.Errorf("open local cloud: %w: %w", provider.ErrUnavailable, err)
	}
	if opts.Catalog == nil {
		opts.Catalog = DefaultCatalog()
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = provider.DefaultOrphanTimeout
	}
	if err := CheckCatalog(opts.Catalog, "Options.Catalog"); err != nil {
		return nil, fmt.Errorf("open local cloud: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "instances"), 0o700); err != nil {
		return nil, fmt.Errorf("open local cloud: %w", err)
	}
	c := &Cloud{o: opts, log: opts.Logger.Named("localcloud"), insts: map[string]*instance{}, wake: make(chan struct{}, 1)}
	if err := c.open(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("open local cloud %s: %w", opts.Dir, err)
	}
	return c, nil
}

func (c *Cloud) open(ctx context.Context) error {
	var err error
	if c.lock, err = os.OpenFile(filepath.Join(c.o.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return err
	}
	if err := unix.Flock(int(c.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("another process owns this local cloud (lock %s): %w", c.lock.Name(), err)
	}
	if err := c.loadState(ctx); err != nil {
		return err
	}
	if err := c.register(); err != nil {
		return err
	}
	if _, err := Cleanup(ctx, c.log, c.o.StaleAfter); err != nil {
		c.log.Warn("clean up other local clouds", zap.Error(err))
	}
	if err := c.loadInstances(); err != nil {
		return err
	}
	if err := c.serve(); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	c.wg.Go(func() { c.interrupter(runCtx) })
	return nil
}

// loadState reads cloud.json, or makes a new cloud, and makes sure its
// bridge exists.
func (c *Cloud) loadState(ctx context.Context) error {
	path := filepath.Join(c.o.Dir, "cloud.json")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &c.st); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if !c.st.Bridge.Exists() {
			br := c.st.Bridge
			for _, args := range [][]string{{"link", "add", br.Name, "type", "bridge"}, {"addr", "add", br.Addr() + "/24", "dev", br.Name}, {"link", "set", br.Name, "up"}} {
				if err := nsmachine.IP(ctx, args...); err != nil {
					return fmt.Errorf("bring back bridge %s: %w", br.Name, err)
				}
			}
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read %s: %w", path, err)
	}
	c.st.ID = strings.ToLower(rand.Text()[:5])
	if c.st.Bridge, err = nsmachine.CreateBridge(ctx, "scvc"+c.st.ID+"br"); err != nil {
		return err
	}
	return c.saveState()
}

func (c *Cloud) saveState() error {
	return jsonfile.Write(filepath.Join(c.o.Dir, "cloud.json"), c.st, 0o600)
}

// serve starts the metadata service on the bridge and the admin socket.
func (c *Cloud) serve() error {
	ln, err := net.Listen("tcp", net.JoinHostPort(c.st.Bridge.Addr(), fmt.Sprint(c.st.IMDSPort)))
	if err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}
	if c.st.IMDSPort == 0 {
		c.st.IMDSPort = ln.Addr().(*net.TCPAddr).Port
		if err := c.saveState(); err != nil {
			_ = ln.Close()
			return err
		}
	}
	c.imds = &http.Server{Handler: c.imdsHandler(), ReadHeaderTimeout: 5 * time.Second}
	sock := filepath.Join(c.o.Dir, "admin.sock")
	_ = os.Remove(sock)
	aln, err := net.Listen("unix", sock)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("admin socket: %w", err)
	}
	c.admin = &http.Server{Handler: c.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	for _, s := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{c.imds, ln}, {c.admin, aln}} {
		c.wg.Go(func() {
			if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				c.log.Error("serve", zap.Error(err))
			}
		})
	}
	return nil
}

// Name returns "local".
func (c *Cloud) Name() string { return "local" }

// Metadata is the base URL of the metadata service on the bridge.
func (c *Cloud) Metadata() string {
	return "http://" + net.JoinHostPort(c.st.Bridge.Addr(), fmt.Sprint(c.st.IMDSPort))
}

// Bridge is the cloud's bridge, from which its instances are reached.
func (c *Cloud) Bridge() nsmachine.Bridge { return c.st.Bridge }

// AdminSocket is the path of the admin socket (see Interrupt).
func (c *Cloud) AdminSocket() string { return filepath.Join(c.o.Dir, "admin.sock") }

// Close stops the metadata service, the admin socket and the scheduled
// terminations, and releases the lock; the instances go on (the next Open
// of the directory finds them). It is idempotent.
func (c *Cloud) Close() {
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		for _, s := range []*http.Server{c.imds, c.admin} {
			if s != nil {
				_ = s.Close()
			}
		}
		c.wg.Wait()
		if c.lock != nil {
			_ = c.lock.Close()
		}
	})
}

// Destroy terminates every instance, closes the cloud and removes its
// bridge and cgroup; the error says what could not be removed. The state
// directory is left (its instance records say what became of them).
func (c *Cloud) Destroy(ctx context.Context) error {
	var ids []string
	var rest []*nsmachine.Machine // terminated, but something of them is left
	c.mu.Lock()
	for id, in := range c.insts {
		switch {
		case in.Instance.State != provider.Terminated:
			ids = append(ids, id)
		case in.Machine != nil && len(in.Machine.Gone()) > 0:
			rest = append(rest, in.Machine)
		}
	}
	c.mu.Unlock()
	err := c.Terminate(ctx, ids)
	for _, m := range rest {
		err = errors.Join(err, m.Terminate(ctx))
	}
	c.Close()
	if berr := c.st.Bridge.Delete(ctx); berr != nil {
		err = errors.Join(err, berr)
	}
	if cerr := nsmachine.RemoveCgroup(c.cgroupParent()); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err == nil {
		_ = os.Remove(registryEntry(c.st.ID))
	}
	if err != nil {
		return fmt.Errorf("destroy local cloud %s: %w", c.o.Dir, err)
	}
	return nil
}

// cgroupParent is the cgroup the instances' cgroups are made in.
func (c *Cloud) cgroupParent() string { return cgroupParentOf(c.st.ID) }

// Leftovers lists what is left of the cloud's instances that should be
// gone (terminated ones whose namespace, link, cgroup or init remain),
// and of the cloud itself after Destroy; empty when nothing is.
func (c *Cloud) Leftovers() []string {
	var left []string
	c.mu.Lock()
	for id, in := range c.insts {
		if in.Instance.State == provider.Terminated && in.Machine != nil {
			for _, l := range in.Machine.Gone() {
				left = append(left, id+": "+l)
			}
		}
	}
	c.mu.Unlock()
	return left
}

package localcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/jsonfile"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
)

// The clouds of this host
//
// Every local cloud registers itself in registryDir (its id, its
// directory, its bridge, whether it is ephemeral) while it exists, and the
// process that has it open touches its entry every heartbeatEvery. A cloud
// no process has open any more — its lock is free: a scavd stopped, a test
// killed midway — is destroyed by Cleanup: at once when it is ephemeral
// (a test's), once it has not been heard of for the stale age otherwise
// (a scavd stopped for longer than its instances' orphan timeout, after
// which they have ended themselves), and always by a cleanup of everything
// (scavd --cloud-cleanup). Open cleans up so each time a cloud starts.
// Resources of local clouds that are not registered are never touched.

// registryDir lists the local clouds of this host. /run is emptied at
// boot, as are the namespaces, links and cgroups the clouds are made of.
var registryDir = "/run/scavenger/localclouds"

// heartbeatEvery is how often an open cloud touches its registry entry.
const heartbeatEvery = 30 * time.Second

// registration is a cloud's entry in registryDir.
type registration struct {
	ID        string `json:"id"`
	Dir       string `json:"dir"`
	Bridge    string `json:"bridge"`
	Ephemeral bool   `json:"ephemeral,omitempty"`
}

func registryEntry(id string) string { return filepath.Join(registryDir, id+".json") }

// register writes the cloud's entry (c.st known).
func (c *Cloud) register() error {
	if err := os.MkdirAll(registryDir, 0o700); err != nil {
		return fmt.Errorf("register the cloud: %w", err)
	}
	dir, err := filepath.Abs(c.o.Dir)
	if err != nil {
		return err
	}
	r := registration{ID: c.st.ID, Dir: dir, Bridge: c.st.Bridge.Name, Ephemeral: c.o.Ephemeral}
	if err := jsonfile.Write(registryEntry(c.st.ID), r, 0o600); err != nil {
		return fmt.Errorf("register the cloud: %w", err)
	}
	return nil
}

// heartbeat tells Cleanup the cloud is in use.
func (c *Cloud) heartbeat() {
	now := time.Now()
	_ = os.Chtimes(registryEntry(c.st.ID), now, now)
}

// errInUse: a process has the cloud open.
var errInUse = errors.New("in use")

// Cleanup destroys the local clouds of this host that no process has open
// and that are ephemeral or were last heard of more than staleAfter ago
// (any, for staleAfter 0): their instances, bridges, namespaces and
// cgroups. It returns the ids of those it destroyed; the error names those
// it could not.
func Cleanup(ctx context.Context, log *zap.Logger, staleAfter time.Duration) ([]string, error) {
	ents, err := os.ReadDir(registryDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clean up local clouds: %w", err)
	}
	var destroyed []string
	var errs []error
	for _, e := range ents {
		path := filepath.Join(registryDir, e.Name())
		b, err := os.ReadFile(path)
		st, serr := os.Stat(path)
		var r registration
		if err != nil || serr != nil || json.Unmarshal(b, &r) != nil || r.ID == "" {
			continue // being written, or not ours
		}
		if staleAfter > 0 && !r.Ephemeral && time.Since(st.ModTime()) < staleAfter {
			continue
		}
		switch err := destroyRegistered(ctx, log, r); {
		case errors.Is(err, errInUse):
		case err != nil:
			errs = append(errs, fmt.Errorf("local cloud %s (%s): %w", r.ID, r.Dir, err))
		default:
			log.Info("destroyed a local cloud no process had open", zap.String("cloud", r.ID), zap.String("dir", r.Dir), zap.Bool("ephemeral", r.Ephemeral))
			destroyed = append(destroyed, r.ID)
			_ = os.Remove(path)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return destroyed, fmt.Errorf("clean up local clouds: %w", err)
	}
	return destroyed, nil
}

// DestroyDir destroys the local cloud in dir unless a process has it open
// (an error then): its instances, bridge, namespaces and cgroups, whether
// it is registered or not.
func DestroyDir(ctx context.Context, log *zap.Logger, dir string) error {
	c, err := openForDestroy(log, dir)
	if errors.Is(err, errInUse) {
		return fmt.Errorf("destroy local cloud %s: a running scavd has it open (stop it first)", dir)
	}
	if err != nil {
		return fmt.Errorf("destroy local cloud %s: %w", dir, err)
	}
	return c.Destroy(ctx)
}

// destroyRegistered destroys the cloud r names, through its directory
// when it is there, else by the names of what it is made of.
func destroyRegistered(ctx context.Context, log *zap.Logger, r registration) error {
	if _, err := os.Stat(filepath.Join(r.Dir, "cloud.json")); err != nil {
		return sweep(ctx, r.ID, r.Bridge)
	}
	c, err := openForDestroy(log, r.Dir)
	if err != nil {
		return err
	}
	return c.Destroy(ctx)
}

// openForDestroy takes the lock of the cloud in dir (errInUse when a
// process has it) and reads its state and instances, without serving
// anything or bringing its bridge back.
func openForDestroy(log *zap.Logger, dir string) (*Cloud, error) {
	c := &Cloud{o: Options{Logger: log, Dir: dir, Catalog: DefaultCatalog()}, log: log.Named("localcloud"), insts: map[string]*instance{}, wake: make(chan struct{}, 1)}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = lock.Close()
		return nil, errInUse
	}
	c.lock = lock
	b, err := os.ReadFile(filepath.Join(dir, "cloud.json"))
	if err == nil {
		err = json.Unmarshal(b, &c.st)
	}
	if err == nil {
		err = c.loadInstances()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// sweep removes what is left of the cloud id without its records: the
// processes in its namespaces, the namespaces, its links and its cgroups.
func sweep(ctx context.Context, id, bridge string) error {
	var errs []error
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), netnsPrefix(id)) {
			continue
		}
		if ino, err := nsmachine.NetNSInode(e.Name()); err == nil {
			for _, p := range nsmachine.ProcsInNet(ino) {
				_ = unix.Kill(p.PID, unix.SIGKILL)
			}
		}
		errs = append(errs, nsmachine.IP(ctx, "netns", "del", e.Name()))
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		if strings.HasPrefix(l.Name(), linkPrefix(id)) && nsmachine.LinkExists(l.Name()) {
			if err := nsmachine.IP(ctx, "link", "del", l.Name()); err != nil && nsmachine.LinkExists(l.Name()) {
				errs = append(errs, err)
			}
		}
	}
	if bridge != "" && nsmachine.LinkExists(bridge) {
		errs = append(errs, nsmachine.IP(ctx, "link", "del", bridge))
	}
	errs = append(errs, nsmachine.RemoveCgroupTree(cgroupParentOf(id)))
	return errors.Join(errs...)
}

// netnsWithPrefix reports whether a network namespace named with prefix exists.
func netnsWithPrefix(prefix string) bool {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			return true
		}
	}
	return false
}

// The names a cloud's resources are made with (see launch and loadState).
func netnsPrefix(id string) string    { return "scavenger-" + id + "-" }
func linkPrefix(id string) string     { return "scvc" + id }
func cgroupParentOf(id string) string { return "scavenger-" + id }

package localcloud

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/jsonfile"
	"github.com/scavenger-ml/scavenger/internal/nsmachine"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
)

// instance is the cloud's record of one instance, kept in
// Dir/instances/<id>/state.json next to its keys, sshd config and log.
type instance struct {
	Instance provider.Instance  `json:"instance"`
	Machine  *nsmachine.Machine `json:"machine,omitempty"`
	Token    string             `json:"token,omitempty"`
	// Notice is when it was interrupted and Interrupt when its notice runs
	// out (it is terminated then); nil when it is not interrupted.
	Notice    *time.Time `json:"notice,omitempty"`
	Interrupt *time.Time `json:"interrupt,omitempty"`
	// Ended is when it was terminated.
	Ended *time.Time `json:"ended,omitempty"`
}

func (c *Cloud) instanceDir(id string) string { return filepath.Join(c.o.Dir, "instances", id) }

func (c *Cloud) save(in *instance) error {
	return jsonfile.Write(filepath.Join(c.instanceDir(in.Instance.ID), "state.json"), in, 0o600)
}

// loadInstances reads the instance records; an instance whose init died
// meanwhile (the host rebooted) is terminated.
func (c *Cloud) loadInstances() error {
	ents, err := os.ReadDir(filepath.Join(c.o.Dir, "instances"))
	if err != nil {
		return fmt.Errorf("read instances: %w", err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(c.instanceDir(e.Name()), "state.json"))
		if err != nil {
			continue // made but never started
		}
		var in instance
		if err := json.Unmarshal(b, &in); err != nil {
			c.log.Warn("unreadable instance record", zap.String("instance", e.Name()), zap.Error(err))
			continue
		}
		c.insts[in.Instance.ID] = &in
		if in.Instance.Alive() && (in.Machine == nil || !in.Machine.Alive()) {
			c.log.Warn("instance died while the cloud was closed; terminating it", zap.String("instance", in.Instance.ID))
			c.terminateLocked(context.Background(), &in)
		}
	}
	return nil
}

// Types lists the catalog's types.
func (c *Cloud) Types(context.Context) ([]provider.InstanceType, error) {
	var out []provider.InstanceType
	for _, t := range c.o.Catalog.Types {
		out = append(out, provider.InstanceType{Name: t.Name, Slots: t.WorkerSlots(), CPUs: t.VCPUs, MemoryMiB: memoryMiB(t),
			Zones: c.zones(), Spot: spotUSD(t) > 0})
	}
	return out, nil
}

// Prices returns the catalog's prices: on demand per type, spot per type
// and zone.
func (c *Cloud) Prices(_ context.Context, types []string) ([]provider.Price, error) {
	now := time.Now().UTC()
	var out []provider.Price
	for _, name := range types {
		t, ok := lookup(c.o.Catalog, name)
		if !ok {
			return nil, fmt.Errorf("prices: unknown instance type %q", name)
		}
		od, _ := t.HourlyIn(Region, false)
		out = append(out, provider.Price{Type: name, Market: provider.OnDemand, USDPerHour: od, At: now})
		if sp := spotUSD(t); sp > 0 {
			for _, z := range c.zones() {
				out = append(out, provider.Price{Type: name, Zone: z, Market: provider.Spot, USDPerHour: sp, At: now})
			}
		}
	}
	return out, nil
}

// Billing is the catalog's billing rule.
func (c *Cloud) Billing() provider.Billing { return billing(c.o.Catalog) }

// zones are the catalog's zones of the local region.
func (c *Cloud) zones() []string { return c.o.Catalog.Zones(Provider, Region) }

// memoryMiB is t's memory limit in MiB.
func memoryMiB(t price.MachineType) int { return int(t.MemoryGiB * 1024) }

// Provision starts req.Count instances (see provider.ProvisionRequest). A
// zone's capacity for a type (its Capacity in the catalog) counts its live instances.
func (c *Cloud) Provision(ctx context.Context, req provider.ProvisionRequest) ([]provider.Instance, error) {
	t, err := c.check(req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.Token != "" {
		var same []provider.Instance
		for _, in := range c.insts {
			if in.Token == req.Token {
				same = append(same, in.Instance)
			}
		}
		if len(same) > 0 {
			return sortByID(same), nil
		}
	}
	if t.Capacity > 0 {
		n := 0
		for _, in := range c.insts {
			if in.Instance.Alive() && in.Instance.Type == t.Name && in.Instance.Zone == req.Zone {
				n++
			}
		}
		if n+req.Count > t.Capacity {
			return nil, fmt.Errorf("provision %d %s in %s: %w: %d of %d in use", req.Count, t.Name, req.Zone, provider.ErrCapacity, n, t.Capacity)
		}
	}
	var out []provider.Instance
	for range req.Count {
		in, err := c.launch(ctx, t, req)
		if err != nil {
			return out, fmt.Errorf("provision %s in %s: %w", t.Name, req.Zone, err)
		}
		out = append(out, in.Instance)
	}
	return out, nil
}

// check validates a request against the catalog.
func (c *Cloud) check(req provider.ProvisionRequest) (price.MachineType, error) {
	t, ok := lookup(c.o.Catalog, req.Type)
	switch {
	case !ok:
		return t, fmt.Errorf("provision: unknown instance type %q", req.Type)
	case !slices.Contains(c.zones(), req.Zone):
		return t, fmt.Errorf("provision: unknown zone %q (have %v)", req.Zone, c.zones())
	case req.Market != provider.OnDemand && req.Market != provider.Spot:
		return t, fmt.Errorf("provision: unknown market %q", req.Market)
	case req.Market == provider.Spot && spotUSD(t) == 0:
		return t, fmt.Errorf("provision %s: %w: no spot market for it", req.Type, provider.ErrCapacity)
	case req.Market == provider.Spot && req.MaxPriceUSD > 0 && req.MaxPriceUSD < spotUSD(t):
		return t, fmt.Errorf("provision %s: %w: spot price %g above the maximum %g", req.Type, provider.ErrCapacity, spotUSD(t), req.MaxPriceUSD)
	case req.Count < 1:
		return t, fmt.Errorf("provision: count %d", req.Count)
	case len(req.Boot.HostKey) == 0 || req.Boot.AuthorizedKey == "":
		return t, errors.New("provision: the request has no host key or authorized key")
	}
	return t, nil
}

// launch starts one instance (c.mu held).
func (c *Cloud) launch(ctx context.Context, t price.MachineType, req provider.ProvisionRequest) (*instance, error) {
	id := newID()
	addr, err := c.freeAddr()
	if err != nil {
		return nil, err
	}
	c.st.Next++
	if err := c.saveState(); err != nil {
		return nil, err
	}
	dir := c.instanceDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sshd := nsmachine.SSHD{Addr: addr, HostKey: filepath.Join(dir, "hostkey"), AuthorizedKeys: filepath.Join(dir, "authorized_keys"), PidFile: "none",
		SetEnv: []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + c.Metadata(), "TMPDIR=" + nsmachine.LocalTmp}}
	for name, data := range map[string][]byte{"hostkey": req.Boot.HostKey, "authorized_keys": []byte(req.Boot.AuthorizedKey + "\n"), "sshd_config": []byte(sshd.Config())} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	in := &instance{Token: req.Token, Instance: provider.Instance{ID: id, Type: t.Name, Zone: req.Zone, Market: req.Market, State: provider.Pending,
		Addr: addr, Tags: maps.Clone(req.Tags), Launched: time.Now().UTC()}}
	if err := c.save(in); err != nil { // recorded before it exists: a crash now leaves nothing unknown
		return nil, err
	}
	m, err := nsmachine.Start(ctx, nsmachine.Spec{Name: id, NetNS: netnsPrefix(c.st.ID) + id, Veth: linkPrefix(c.st.ID) + strconv.FormatInt(int64(c.st.Next), 36),
		Bridge: c.st.Bridge, Addr: addr, Isolate: true, CPUs: t.VCPUs, MemoryBytes: int64(memoryMiB(t)) << 20, DiskBytes: int64(t.DiskMiB) << 20,
		Cgroup: c.cgroupParent() + "/" + id, Init: initCommand(filepath.Join(dir, "sshd_config"), req.OrphanTimeout), Log: filepath.Join(dir, "console.log")})
	if err != nil {
		now := time.Now().UTC()
		in.Instance.State, in.Ended = provider.Terminated, &now
		_ = c.save(in)
		c.insts[id] = in
		return nil, err
	}
	in.Machine = m
	c.insts[id] = in
	if err := c.save(in); err != nil {
		return nil, err
	}
	c.log.Info("instance launched", zap.String("instance", id), zap.String("type", t.Name), zap.String("zone", req.Zone),
		zap.String("market", req.Market), zap.String("addr", addr))
	return in, nil
}

// initCommand is an instance's init: sshd, with, for a positive
// orphanTimeout, the watchdog beside it (provider.WatchdogScript), which
// ends the instance by signalling its init (sshd ends on SIGTERM, and the
// instance's PID namespace with it).
func initCommand(sshdConfig string, orphanTimeout time.Duration) []string {
	sshd := nsmachine.SSHDInit(sshdConfig)
	if orphanTimeout <= 0 {
		return sshd
	}
	var q []string
	for _, a := range sshd {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return []string{"/bin/sh", "-c", "(\n" + provider.WatchdogScript(orphanTimeout, "kill -TERM 1") + "\n) &\nexec " + strings.Join(q, " ")}
}

// freeAddr is the lowest bridge address no live instance has (c.mu held).
func (c *Cloud) freeAddr() (string, error) {
	used := map[string]bool{}
	for _, in := range c.insts {
		if in.Instance.State != provider.Terminated {
			used[in.Instance.Addr] = true
		}
	}
	for i := 1; i <= 240; i++ {
		if a := c.st.Bridge.HostAddr(i); !used[a] {
			return a, nil
		}
	}
	return "", fmt.Errorf("%w: no free address on the bridge", provider.ErrCapacity)
}

func newID() string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return "i-" + hex.EncodeToString(b)[:17]
}

func sortByID(in []provider.Instance) []provider.Instance {
	slices.SortFunc(in, func(a, b provider.Instance) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return in
}

// WaitReady waits until each instance's sshd answers, and marks it
// running. An instance whose init (sshd) died meanwhile is terminated and
// named with the last lines of its console, at once, not at ctx's end.
func (c *Cloud) WaitReady(ctx context.Context, ids []string) ([]provider.Instance, error) {
	var out []provider.Instance
	for _, id := range ids {
		c.mu.Lock()
		in, ok := c.insts[id]
		var addr string
		var m *nsmachine.Machine
		if ok {
			addr, m = in.Instance.Addr, in.Machine
		}
		c.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("wait for %s: %w", id, provider.ErrNotFound)
		}
		if err := waitListen(ctx, net.JoinHostPort(addr, "22"), m); errors.Is(err, errInitDied) {
			c.mu.Lock()
			terr := c.terminateLocked(context.WithoutCancel(ctx), in)
			c.mu.Unlock()
			return nil, errors.Join(fmt.Errorf("wait for %s: %w; its console: %s", id, err, consoleTail(filepath.Join(c.instanceDir(id), "console.log"), 3)), terr)
		} else if err != nil {
			return nil, fmt.Errorf("wait for %s: %w", id, err)
		}
		c.mu.Lock()
		if in.Instance.State == provider.Pending {
			in.Instance.State = provider.Running
			_ = c.save(in)
		}
		inst := in.Instance
		c.mu.Unlock()
		if inst.State != provider.Running {
			return nil, fmt.Errorf("wait for %s: it is %s", id, inst.State)
		}
		out = append(out, inst)
	}
	return out, nil
}

// errInitDied: the instance's init is gone before its sshd answered.
var errInitDied = errors.New("the instance died as it booted: its init (sshd) exited")

// waitListen waits for addr to accept a connection while m's init runs.
func waitListen(ctx context.Context, addr string, m *nsmachine.Machine) error {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		if m != nil && !m.Alive() {
			return errInitDied
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sshd at %s: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// consoleTail is the last n lines of an instance's console log, on one line.
func consoleTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// List returns the live instances with every tag of tags.
func (c *Cloud) List(_ context.Context, tags map[string]string) ([]provider.Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []provider.Instance
	for _, in := range c.insts {
		if in.Instance.Alive() && hasTags(in.Instance.Tags, tags) {
			out = append(out, in.Instance)
		}
	}
	return sortByID(out), nil
}

func hasTags(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Terminate ends the instances ids.
func (c *Cloud) Terminate(ctx context.Context, ids []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, id := range ids {
		in, ok := c.insts[id]
		if !ok {
			errs = append(errs, fmt.Errorf("terminate %s: %w", id, provider.ErrNotFound))
			continue
		}
		if err := c.terminateLocked(ctx, in); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// terminateLocked ends one instance (c.mu held).
func (c *Cloud) terminateLocked(ctx context.Context, in *instance) error {
	if in.Instance.State == provider.Terminated {
		return nil
	}
	var err error
	if in.Machine != nil {
		err = in.Machine.Terminate(ctx)
	}
	now := time.Now().UTC()
	in.Instance.State, in.Ended = provider.Terminated, &now
	if serr := c.save(in); serr != nil {
		err = errors.Join(err, serr)
	}
	c.log.Info("instance terminated", zap.String("instance", in.Instance.ID), zap.Error(err))
	if err != nil {
		return fmt.Errorf("terminate %s: %w", in.Instance.ID, err)
	}
	return nil
}

// Ended returns when instance id was terminated (zero when it was not, or
// is unknown): what the cloud bills until.
func (c *Cloud) Ended(id string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in, ok := c.insts[id]; ok && in.Ended != nil {
		return *in.Ended
	}
	return time.Time{}
}

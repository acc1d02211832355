// Package builtin is the catalog of the launchers linked into scavd and
// scavctl (local, ssh, slurm and cloudvm; they run in process) and the one place a
// program picks and opens its launcher: a built-in by name, an external
// plugin binary by path and checksum, or, for a daemon scavctl starts
// itself, the one its environment calls for.
//
// The cloudvm launcher opens one provider (cloud.go): aws (EC2), gce
// (Compute Engine), or local,
// the local test and development cloud (launchers/cloudvm/localcloud:
// namespace machines on this host, root only; nothing is paid). The local
// cloud is linked in as one provider among others, so that a laptop or CI
// runs the whole cloud path without an account; it starts nothing until
// cloud.provider names it.
package builtin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/launchers/ssh"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

// Options configure the built-in launchers; each launcher reads its own part.
type Options struct {
	// KillOnParentDeath ties local workers to this process.
	KillOnParentDeath bool
	// LocalSlots is how many workers the "local" launcher starts at most
	// (scavd's --local-slots); 0: $SCAV_LOCAL_SLOTS when set, else the
	// number of CPUs.
	LocalSlots int
	// SSH configures the "ssh" launcher (scavd's --ssh-* flags).
	SSH SSHOptions
	// Slurm configures the "slurm" launcher; its Logger is set by Catalog.
	Slurm slurm.Options
	// Cloud configures the "cloudvm" launcher (cloud.go).
	Cloud CloudOptions
}

// SSHOptions configure the "ssh" launcher; see launchers/ssh.Options.
type SSHOptions struct {
	// Hosts are inventory lines, "[user@]addr[:port] [slots=N]" (--ssh-host).
	Hosts []string
	// Inventory is a file of such lines, '#' comments allowed (--ssh-inventory).
	// Its hosts come before those of Hosts.
	Inventory string
	// User logs in to hosts that name none (--ssh-user; default root).
	User string
	// KeyFiles, UseAgent and KnownHosts: --ssh-key, --ssh-agent, --ssh-known-hosts.
	KeyFiles   []string
	UseAgent   bool
	KnownHosts []string
	// NoTelemetryForward gives workers the daemon's socket path as it is
	// (--ssh-forward-telemetry=false).
	NoTelemetryForward bool
}

// newSSH builds the ssh launcher, reporting every problem with the flags that fix it.
func newSSH(o SSHOptions, log *zap.Logger) (plugins.Launcher, error) {
	var hosts []ssh.Host
	var errs []error
	if o.Inventory != "" {
		h, err := ssh.LoadInventory(o.Inventory)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ssh-inventory: %w", err))
		}
		hosts = append(hosts, h...)
	}
	h, err := ssh.ParseHosts(o.Hosts)
	if err != nil {
		errs = append(errs, fmt.Errorf("--ssh-host: %w", err))
	}
	hosts = append(hosts, h...)
	if len(errs) == 0 && len(hosts) == 0 {
		errs = append(errs, errors.New(`no hosts: give --ssh-host "[user@]addr[:port] [slots=N]" (repeatable) or --ssh-inventory FILE`))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ssh launcher: %w", err)
	}
	l, err := ssh.New(ssh.Options{Logger: log, Hosts: hosts, User: o.User, KeyFiles: o.KeyFiles, UseAgent: o.UseAgent,
		KnownHosts: o.KnownHosts, NoTelemetryForward: o.NoTelemetryForward})
	if err != nil {
		return nil, fmt.Errorf("ssh launcher (--ssh-key, --ssh-agent, --ssh-known-hosts): %w", err)
	}
	return l, nil
}

// Catalog is the catalog of the built-in launchers. "local" starts workers
// on this node (their orphans collected by reaper, when set); "ssh" starts
// them on the hosts of opts.SSH (and fails, naming the flags, without
// hosts); "slurm" runs them as srun steps of an allocation, or submits them
// with sbatch.
func Catalog(opts Options, reaper *local.Reaper) *Registry {
	c := NewRegistry()
	_ = c.Register("local", func(log *zap.Logger) (plugins.Launcher, error) {
		return local.New(local.Options{Logger: log, KillOnParentDeath: opts.KillOnParentDeath, Reaper: reaper,
			MaxWorkers: LocalSlots(opts.LocalSlots)}), nil
	})
	_ = c.Register("ssh", func(log *zap.Logger) (plugins.Launcher, error) { return newSSH(opts.SSH, log) })
	_ = c.Register("slurm", func(log *zap.Logger) (plugins.Launcher, error) {
		o := opts.Slurm
		o.Logger = log
		return slurm.New(o)
	})
	_ = c.Register("cloudvm", func(*zap.Logger) (plugins.Launcher, error) {
		return nil, errors.New("the cloudvm launcher holds a provider: open it with builtin.Open")
	})
	return c
}

// LocalSlots is the capacity of the local launcher for the setting slots:
// slots when positive, else $SCAV_LOCAL_SLOTS when it is a positive number,
// else the number of CPUs this process may use.
func LocalSlots(slots int) int {
	if slots > 0 {
		return slots
	}
	if n, err := strconv.Atoi(os.Getenv("SCAV_LOCAL_SLOTS")); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// Names lists the built-in launchers.
func Names() []string { return Catalog(Options{}, nil).Names() }

// Open opens the built-in launcher called name ("" is "local"). The local
// launcher comes with the orphan reaper it needs: this process becomes the
// subreaper of the workers' descendants, since PID 1 may not reap them.
// The returned function releases what Open started.
func Open(ctx context.Context, name string, opts Options, log *zap.Logger) (plugins.Launcher, func(), error) {
	if name == "" {
		name = "local"
	}
	if name == "cloudvm" {
		l, release, err := openCloud(ctx, opts.Cloud, log)
		if err != nil {
			return nil, nil, fmt.Errorf("open launcher cloudvm: %w", err)
		}
		return l, release, nil
	}
	var reaper *local.Reaper
	release := func() {}
	if name == "local" {
		var err error
		if reaper, err = local.StartReaper(context.WithoutCancel(ctx), log); err != nil { // it lives until release
			return nil, nil, fmt.Errorf("open launcher local: %w", err)
		}
		release = reaper.Stop
	}
	l, err := Catalog(opts, reaper).New(name, log)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("open launcher: %w", err)
	}
	return l, release, nil
}

// OpenPlugin starts an external launcher plugin binary whose sha256 is
// sumHex and returns its launcher and the function that ends it.
func OpenPlugin(ctx context.Context, path, sumHex string, log *zap.Logger) (plugins.Launcher, func(), error) {
	sum, err := hex.DecodeString(sumHex)
	if err != nil || len(sum) != 32 {
		return nil, nil, fmt.Errorf("launcher plugin %s: --plugin-sha256 %q is not a sha256 in hex (sha256sum prints it)", path, sumHex)
	}
	return goplugin.Load(ctx, path, sum, log)
}

// Standalone names the launcher of a daemon scavctl starts itself: inside a
// Slurm allocation ($SLURM_JOB_ID set, srun on PATH) "slurm", so that every
// attempt is a job step of the allocation; else "local". $SCAV_LAUNCHER
// decides instead when set.
func Standalone() string {
	if name := os.Getenv("SCAV_LAUNCHER"); name != "" {
		return name
	}
	if _, err := exec.LookPath("srun"); err == nil && os.Getenv("SLURM_JOB_ID") != "" {
		return "slurm"
	}
	return "local"
}

package builtin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/awscloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/gcecloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/localcloud"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/optimizer/price"
	"github.com/scavenger-ml/scavenger/plugins"
)

// CloudOptions configure the "cloudvm" launcher (scavd's cloud: group;
// deploy/scavd.yaml says what each does).
type CloudOptions struct {
	// Provider is "aws", "gce", or "local": the local test and development
	// cloud (namespace machines on this host).
	Provider string
	// StateDir keeps the pools' keys and charges and, for the local
	// provider, the local cloud (default: <the daemon's state dir>/cloud).
	StateDir string
	// Catalog is a machine catalog file (optimizer/price's schema): for
	// local, the local cloud's types, zones, billing and prices (default:
	// the embedded one); for aws, one that extends or overrides the
	// embedded price catalog.
	Catalog string
	// Types, Zones, Market: the launcher's (see cloudvm.Options).
	Types  []string
	Zones  []string
	Market string
	// Region, Subnets ("zone=subnet-id"), Image, Key, InstanceProfile,
	// SecurityGroups, Endpoint and Metadata are the aws provider's; Project,
	// PublicIP, Image, Endpoint and Metadata the gce provider's.
	Region          string
	Project         string
	PublicIP        bool
	Subnets         []string
	Image           string
	Key             string
	InstanceProfile string
	SecurityGroups  []string
	Endpoint        string
	Metadata        string
	// User is the login user on the instances.
	User string
	// Owner names this scavd in the instances' owner tag (default: the
	// host name and the state directory's base name).
	Owner string
	// MaxInstances, PoolLimit, IdleRelease, Blocklist, NoticeInterval and
	// OrphanTimeout: see cloudvm.Options.
	MaxInstances   int
	PoolLimit      int
	IdleRelease    time.Duration
	Blocklist      time.Duration
	NoticeInterval time.Duration
	OrphanTimeout  time.Duration
	// Rebalance also acts on rebalance recommendations.
	Rebalance bool
	// NoTelemetryForward gives the workers the daemon's socket path as it is.
	NoTelemetryForward bool
}

// openCloud opens the provider and the cloudvm launcher over it; the
// function returned closes both.
func openCloud(ctx context.Context, o CloudOptions, log *zap.Logger) (plugins.Launcher, func(), error) {
	if o.StateDir == "" {
		return nil, nil, errors.New("cloud: no state directory (cloud.state_dir)")
	}
	prov, closeProv, err := openProvider(ctx, o, log)
	if err != nil {
		return nil, nil, fmt.Errorf("cloud provider %s: %w", o.Provider, err)
	}
	owner := o.Owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = host + "-" + filepath.Base(filepath.Dir(filepath.Clean(o.StateDir)))
	}
	l, err := cloudvm.New(ctx, cloudvm.Options{Logger: log, Provider: prov, StateDir: filepath.Join(o.StateDir, "launcher"),
		Types: o.Types, Zones: o.Zones, Market: o.Market, Owner: owner, MaxInstances: o.MaxInstances, PoolLimit: o.PoolLimit, IdleRelease: o.IdleRelease,
		Blocklist: o.Blocklist, NoticeInterval: o.NoticeInterval, OrphanTimeout: o.OrphanTimeout, Rebalance: o.Rebalance, User: o.User,
		NoTelemetryForward: o.NoTelemetryForward})
	if err != nil {
		closeProv()
		return nil, nil, fmt.Errorf("cloud launcher: %w", err)
	}
	return l, func() {
		if err := l.Close(); err != nil {
			log.Warn("close the cloud launcher", zap.Error(err))
		}
		closeProv()
	}, nil
}

// openProvider opens the provider o names.
func openProvider(ctx context.Context, o CloudOptions, log *zap.Logger) (provider.Provider, func(), error) {
	switch o.Provider {
	case "", "local":
		var cat *price.Catalog
		if o.Catalog != "" {
			var err error
			if cat, err = localcloud.LoadCatalog(o.Catalog); err != nil {
				return nil, nil, err
			}
		}
		c, err := localcloud.Open(ctx, localcloud.Options{Logger: log, Dir: filepath.Join(o.StateDir, "localcloud"), Catalog: cat})
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	case "gce":
		cat, err := price.WithOverride(o.Catalog)
		if err != nil {
			return nil, nil, err
		}
		p, err := gcecloud.New(ctx, gcecloud.Options{Logger: log, Project: o.Project, Zones: o.Zones, Types: o.Types, Catalog: cat, Image: o.Image,
			PublicIP: o.PublicIP, Endpoint: o.Endpoint, Metadata: o.Metadata})
		if err != nil {
			return nil, nil, err
		}
		return p, func() {}, nil
	case "aws":
		cat, err := price.WithOverride(o.Catalog)
		if err != nil {
			return nil, nil, err
		}
		subnets := map[string]string{}
		for _, s := range o.Subnets {
			zone, id, ok := strings.Cut(s, "=")
			if !ok {
				return nil, nil, fmt.Errorf("subnet %q: want zone=subnet-id", s)
			}
			subnets[zone] = id
		}
		p, err := awscloud.New(ctx, awscloud.Options{Logger: log, Region: o.Region, Zones: o.Zones, Subnets: subnets, Types: o.Types, Catalog: cat,
			Image: o.Image, KeyName: o.Key, InstanceProfile: o.InstanceProfile, SecurityGroups: o.SecurityGroups, Endpoint: o.Endpoint, Metadata: o.Metadata})
		if err != nil {
			return nil, nil, err
		}
		return p, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown provider %q: use local, aws or gce", o.Provider)
}

// CleanupCloud destroys the local clouds of this host that no scavd has
// open (scavd --cloud-cleanup): the one in o.StateDir, registered or not,
// and every other registered one (localcloud.Cleanup), with their
// instances, bridges, namespaces and cgroups; the charges of the
// instances destroyed end when they did. It returns what it destroyed.
func CleanupCloud(ctx context.Context, o CloudOptions, log *zap.Logger) ([]string, error) {
	if o.StateDir == "" {
		return nil, errors.New("cloud cleanup: no state directory (cloud.state_dir)")
	}
	var done []string
	var errs []error
	dir := filepath.Join(o.StateDir, "localcloud")
	if _, err := os.Stat(filepath.Join(dir, "cloud.json")); err == nil {
		if err := localcloud.DestroyDir(ctx, log, dir); err != nil {
			errs = append(errs, err)
		} else {
			done = append(done, dir)
		}
		if recs, err := localcloud.ReadRecords(dir); err == nil {
			ended := map[string]time.Time{}
			for _, r := range recs {
				if r.Ended != nil {
					ended[r.ID] = *r.Ended
				}
			}
			errs = append(errs, cloudvm.EndCharges(filepath.Join(o.StateDir, "launcher"), func(id string) (time.Time, bool) {
				t, ok := ended[id]
				return t, ok
			}))
		}
	}
	others, err := localcloud.Cleanup(ctx, log, 0)
	done = append(done, others...)
	if err := errors.Join(append(errs, err)...); err != nil {
		return done, fmt.Errorf("cloud cleanup: %w", err)
	}
	return done, nil
}

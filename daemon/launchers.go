package daemon

import (
	"context"
	"encoding/hex"
	"fmt"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/plugins"
)

// BuiltinOptions configure the built-in launchers; each launcher reads its own part.
type BuiltinOptions struct {
	// KillOnParentDeath ties local workers to this process.
	KillOnParentDeath bool
	// Reaper, when set, collects the orphans of local workers.
	Reaper *local.Reaper
	// Slurm configures the "slurm" launcher; its Logger is set by Builtins.
	Slurm slurm.Options
}

// Builtins is the catalog of the launchers linked into scavd; they run in
// process. "local" starts workers on this node; "slurm" runs them as srun
// steps of an allocation, or submits them with sbatch.
func Builtins(opts BuiltinOptions) *plugins.Catalog {
	c := plugins.NewCatalog()
	_ = c.Register("local", func(log *zap.Logger) (plugins.Launcher, error) {
		return local.New(local.Options{Logger: log, KillOnParentDeath: opts.KillOnParentDeath, Reaper: opts.Reaper}), nil
	})
	_ = c.Register("slurm", func(log *zap.Logger) (plugins.Launcher, error) {
		o := opts.Slurm
		o.Logger = log
		return slurm.New(o)
	})
	return c
}

// LoadPlugin starts an external launcher plugin binary whose sha256 is
// sumHex and returns its launcher and the function that ends it.
func LoadPlugin(ctx context.Context, path, sumHex string, log *zap.Logger) (plugins.Launcher, func(), error) {
	sum, err := hex.DecodeString(sumHex)
	if err != nil || len(sum) != 32 {
		return nil, nil, fmt.Errorf("launcher plugin %s: --plugin-sha256 %q is not a sha256 in hex (sha256sum prints it)", path, sumHex)
	}
	return plugins.Load(ctx, path, sum, log)
}

package daemon

import (
	"context"
	"encoding/hex"
	"fmt"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Builtins is the catalog of the launchers linked into scavd; they run in
// process. "local" starts workers on this node; with a reaper it collects
// their orphans; killOnParentDeath ties the workers to this process.
func Builtins(killOnParentDeath bool, reaper *local.Reaper) *plugins.Catalog {
	c := plugins.NewCatalog()
	_ = c.Register("local", func(log *zap.Logger) (plugins.Launcher, error) {
		return local.New(local.Options{Logger: log, KillOnParentDeath: killOnParentDeath, Reaper: reaper}), nil
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

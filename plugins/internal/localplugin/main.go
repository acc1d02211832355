// Command localplugin serves the local launcher as an external launcher
// plugin. The conformance tests build it and load it with plugins.Load.
package main

import (
	"context"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
)

func main() {
	log := plugins.NewPluginLogger(zapcore.DebugLevel)
	// The plugin process reaps its workers' orphans itself, so that none is
	// left a zombie when it exits.
	reaper, err := local.StartReaper(context.Background(), log)
	if err != nil {
		log.Fatal("start reaper", zap.Error(err))
	}
	defer reaper.Stop()
	plugins.Serve(local.New(local.Options{Logger: log, KillOnParentDeath: true, Reaper: reaper}))
}

// Command localplugin serves the local launcher as an external launcher
// plugin. The conformance tests build it and load it with goplugin.Load.
package main

import (
	"context"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/plugins/goplugin"
)

func main() {
	log := goplugin.NewPluginLogger(zapcore.DebugLevel)
	// The plugin process reaps its workers' orphans itself, so that none is
	// left a zombie when it exits. The conformance suite runs up to 3
	// workers, more than the CPUs of a small CI machine (the default slots).
	l, release, err := builtin.Open(context.Background(), "local", builtin.Options{KillOnParentDeath: true, LocalSlots: 8}, log)
	if err != nil {
		log.Fatal("open the local launcher", zap.Error(err))
	}
	defer release()
	goplugin.Serve(l)
}

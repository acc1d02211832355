// Command localplugin serves the local launcher as an external launcher
// plugin. The conformance tests build it and load it with plugins.Load.
package main

import (
	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/launchers/local"
	"github.com/scavenger-ml/scavenger/plugins"
)

func main() {
	plugins.Serve(local.New(local.Options{
		Logger:            plugins.NewPluginLogger(zapcore.DebugLevel),
		KillOnParentDeath: true,
	}))
}

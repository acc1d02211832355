package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/internal/jsonfile"
)

// The environments of running jobs, kept for the next daemon (recover.go):
// the one thing a job record does not hold that a resume needs.

// RestartSubdir, in the daemon's state directory, holds the environments of
// the jobs to resume after a restart (Options.RestartDir).
const RestartSubdir = "restart"

type restartEntry struct {
	Job string   `json:"job"`
	Env []string `json:"env"`
}

// rememberEnv keeps a job's environment for the next daemon.
func (g *Registry) rememberEnv(id string, env []string) {
	if g.o.RestartDir == "" {
		return
	}
	if err := os.MkdirAll(g.o.RestartDir, 0o700); err == nil {
		if err = jsonfile.Write(filepath.Join(g.o.RestartDir, id+".json"), restartEntry{Job: id, Env: env}, 0o600); err == nil {
			return
		}
	}
	g.log.Warn("keep environment for a restart; the job will not resume by itself", zap.String("job", id))
}

// forgetEnv drops a job's kept environment.
func (g *Registry) forgetEnv(id string) {
	if g.o.RestartDir != "" {
		_ = os.Remove(filepath.Join(g.o.RestartDir, id+".json"))
	}
}

// keptEnvs reads the kept environments.
func (g *Registry) keptEnvs() map[string][]string {
	out := map[string][]string{}
	if g.o.RestartDir == "" {
		return out
	}
	ents, _ := os.ReadDir(g.o.RestartDir)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		var re restartEntry
		b, err := os.ReadFile(filepath.Join(g.o.RestartDir, e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &re)
		}
		if err != nil || re.Job != id {
			g.log.Warn("unreadable restart entry", zap.String("file", e.Name()), zap.Error(err))
			continue
		}
		out[id] = re.Env
	}
	return out
}

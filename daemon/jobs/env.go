package jobs

import (
	"fmt"
	"os"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
)

// workerEnv is the environment the workers of a job get on top of the
// launcher's: the user's, the python client this binary carries first on
// PYTHONPATH, unbuffered python output (so that lines, and progress, arrive
// as they are written) and the job's target with the batch it is counted
// at.
func workerEnv(env []string, pyPath string, o api.Optimize) []string {
	env = withDefault(withPythonPath(env, pyPath), "PYTHONUNBUFFERED", "1")
	if o.TargetSamples > 0 {
		env = append(env[:len(env):len(env)], fmt.Sprintf("SCAV_TARGET_SAMPLES=%d", o.TargetSamples))
		if o.BaseBatch > 0 {
			env = append(env, fmt.Sprintf("SCAV_BASE_BATCH=%d", o.BaseBatch))
		}
	}
	return env
}

// withDefault sets key=value in env unless env sets key already.
func withDefault(env []string, key, value string) []string {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return env
		}
	}
	return append(env[:len(env):len(env)], key+"="+value)
}

// withPythonPath puts dir first on PYTHONPATH in env, so that the workers
// import the scavenger client this binary carries.
func withPythonPath(env []string, dir string) []string {
	if dir == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	val := dir
	for _, kv := range env {
		if rest, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			if rest != "" {
				val = dir + string(os.PathListSeparator) + rest
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "PYTHONPATH="+val)
}

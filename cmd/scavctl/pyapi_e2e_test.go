package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pyAPIScript drives a scavd through scavenger.api as a user's program
// would: it submits a job and waits for it by name, submits a long one and
// stops it by id prefix, and tries requests the daemon or the module refuse;
// it prints what it saw as one JSON object.
const pyAPIScript = `
import json, sys, scavenger
py = sys.argv[1]
out = {}
j = scavenger.run([py, "examples/cnn.py", "--steps", "20"], workers=2, batch_size=32, name="pyapi",
                  env={"OMP_NUM_THREADS": "1"})
out["submitted"] = j["state"]
done = scavenger.wait("pyapi", timeout=120, poll=0.2)
out["id"], out["state"], out["exit"] = done["id"], done["state"], done.get("exit_code")
long = scavenger.run([py, "-c", "import time; time.sleep(600)"], name="sleeper", grace=1)
scavenger.stop(long["id"][:len("sleeper-") + 3])
out["stopped"] = scavenger.wait(long["id"], timeout=60, poll=0.2)["state"]
out["jobs"] = sorted(x["name"] for x in scavenger.jobs())
for name, call in [("no job", lambda: scavenger.job("nosuchjob")),
                   ("bad range", lambda: scavenger.run([py, "x.py"], workers=(4, 2))),
                   ("range without policy", lambda: scavenger.run([py, "x.py"], workers=(1, 2)))]:
    try:
        call()
        out[name] = "accepted"
    except (scavenger.DaemonError, ValueError) as e:
        out[name] = str(e)
print(json.dumps(out))
`

// TestPythonAPIRunsAndFollowsJobs runs scavenger.api against a real scavd:
// a job submitted from python runs to the end, is found by name and id
// prefix, is stopped, and refusals come back as errors that say why.
func TestPythonAPIRunsAndFollowsJobs(t *testing.T) {
	needTorch(t)
	state := stateDir(t)
	startScavd(t, state)
	cmd := exec.Command(pythonBin, "-c", pyAPIScript, pythonBin)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "SCAV_STATE_DIR="+state, "SCAV_API=", "PYTHONPATH="+filepath.Join(repoRoot, "python"))
	b, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("python API script: %v\n%s\n%s", err, b, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("python API script printed %q: %v", b, err)
	}
	t.Logf("%s", b)
	if got["state"] != "succeeded" || got["exit"] != 0.0 || got["stopped"] != "stopped" {
		t.Errorf("python API: job %v ended %v (exit %v), the stopped one %v; want succeeded, 0, stopped", got["id"], got["state"], got["exit"], got["stopped"])
	}
	if js, _ := json.Marshal(got["jobs"]); string(js) != `["pyapi","sleeper"]` {
		t.Errorf("scavenger.jobs(): %s, want pyapi and sleeper", js)
	}
	rec := jobRecord(t, state, got["id"].(string))
	if rec.Name != "pyapi" || rec.Config.Workers != 2 || rec.Config.GlobalBatch != 32 {
		t.Errorf("record of the python-submitted job: %+v, want name pyapi, 2 workers, batch 32", rec)
	}
	for name, want := range map[string]string{"no job": "no job of yours", "bad range": "1 <= MIN <= MAX", "range without policy": "polic"} {
		if s, _ := got[name].(string); s == "accepted" || !strings.Contains(s, want) {
			t.Errorf("python API, %s: %q, want an error saying %q", name, s, want)
		}
	}
}

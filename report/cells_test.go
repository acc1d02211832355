package report

import (
	"testing"

	"github.com/scavenger-ml/scavenger/api"
)

// TestMatchJob: the filters of scavctl jobs (and the dashboard's).
func TestMatchJob(t *testing.T) {
	run := api.Job{Name: "train", State: api.StateRunning}
	done := api.Job{Name: "train", State: api.StateSucceeded}
	for _, c := range []struct {
		j           api.Job
		state, name string
		want        bool
	}{
		{run, "", "", true}, {run, "active", "", true}, {done, "active", "", false},
		{done, "succeeded", "", true}, {run, "succeeded", "", false},
		{run, "", "train", true}, {run, "", "tra", false}, {run, "running", "other", false},
	} {
		if got := MatchJob(c.j, c.state, c.name); got != c.want {
			t.Errorf("MatchJob(%s %s, %q, %q) = %v", c.j.Name, c.j.State, c.state, c.name, got)
		}
	}
}

package api

import (
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/plugins"
)

// TestValidateRefusesReservedEnvAndBadRestarts: the variables Scavenger sets
// for each worker may not come with the request (scavctl and the daemon
// both refuse them, naming --env), nor may a negative --max-restarts.
func TestValidateRefusesReservedEnvAndBadRestarts(t *testing.T) {
	neg, many := -1, MaxMaxRestarts+1
	for _, c := range []struct {
		name string
		req  RunRequest
		want []string // parts of the error; none: valid
	}{
		{"plain", RunRequest{Env: []string{"PATH=/bin", "OMP_NUM_THREADS=2"}}, nil},
		{"job id", RunRequest{Env: []string{"SCAV_JOB_ID=x"}}, []string{"--env SCAV_JOB_ID: Scavenger sets SCAV_JOB_ID"}},
		{"rank and token", RunRequest{Env: []string{"RANK=5", "SCAV_TOKEN=t"}}, []string{"--env RANK", "--env SCAV_TOKEN"}},
		{"negative restarts", RunRequest{MaxRestarts: &neg}, []string{"--max-restarts -1"}},
		{"too many restarts", RunRequest{MaxRestarts: &many}, []string{"--max-restarts 101"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Command, c.req.Config = []string{"/bin/true"}, plugins.Config{Workers: 1}
			err := c.req.Validate()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want %q", err, w)
				}
			}
		})
	}
}

package testslurm

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTwoClusters starts two clusters at once, runs a step on each, and
// relies on their cleanups to check that nothing of them is left.
func TestTwoClusters(t *testing.T) {
	a := Start(t, Options{})
	b := Start(t, Options{CPUs: 4})
	if a.Conf == b.Conf {
		t.Fatalf("both clusters use %s", a.Conf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []*Cluster{a, b} {
		out, err := c.Run(ctx, "srun", "-n", "2", "-l", "sh", "-c", "echo $SLURM_NTASKS")
		if err != nil {
			t.Fatalf("srun: %v", err)
		}
		if got := strings.Count(out, ": 2\n"); got != 2 {
			t.Errorf("srun output %q", out)
		}
		cpus, err := c.Run(ctx, "sinfo", "-h", "-o", "%c")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(cpus) != map[*Cluster]string{a: "8", b: "4"}[c] {
			t.Errorf("cluster %s has %s CPUs", c.Dir, cpus)
		}
	}
	// A held allocation runs, and a batch job still running at the end is
	// cancelled by the teardown.
	id := a.Hold(t, 2)
	if st, err := a.JobState(ctx, id); err != nil || st != "RUNNING" {
		t.Errorf("held job %s: %s, %v", id, st, err)
	}
	if _, err := b.Run(ctx, "sbatch", "--wrap", "exec sleep 600", "-o", "/dev/null"); err != nil {
		t.Fatal(err)
	}
}

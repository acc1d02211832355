package testslurm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/subreaper"
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

// TestPrologEpilog runs a job on a cluster with a prolog and an epilog that
// record the job id: both run (the prolog at allocation, PrologFlags=Alloc).
func TestPrologEpilog(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("SKIP: %v", err)
	}
	dir := t.TempDir()
	hooks := filepath.Join(dir, "hooks.log")
	for _, h := range []string{"prolog", "epilog"} {
		script := "#!/bin/sh\necho \"" + h + " $SLURM_JOB_ID\" >> " + hooks + "\nexit 0\n"
		if err := os.WriteFile(filepath.Join(dir, h+".sh"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := Start(t, Options{Prolog: filepath.Join(dir, "prolog.sh"), Epilog: filepath.Join(dir, "epilog.sh")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Run(ctx, "srun", "-n", "1", "true"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(hooks)
		if string(b) == "prolog 1\nepilog 1\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks.log = %q, want the prolog then the epilog of job 1", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeftoversAreFound makes a job process escape its step (setsid and
// its parent's exit reparent it to the test process, the subreaper): the
// teardown's check must see it by its SLURM_CONF.
func TestLeftoversAreFound(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Run(ctx, "srun", "-n", "1", "sh", "-c", "setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $!")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("srun printed %q", out)
	}
	found := false
	for _, l := range c.leftovers() {
		// By its pid: right after the fork it may still be setsid, not yet sleep.
		found = found || strings.HasPrefix(l, strconv.Itoa(pid)+" (")
	}
	if !found {
		t.Errorf("leftovers %q do not include the escaped sleep %d", c.leftovers(), pid)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// TestMultiNode starts a cluster of three namespace nodes: a 2-node srun
// runs on two nodes that report two different hostnames (lost nodes are
// exercised by launchers/slurm's and the daemon's multi-node tests); after
// the teardown no namespace, bridge or process of the cluster is left, and
// no zombie child of this process.
func TestMultiNode(t *testing.T) {
	var c *Cluster
	t.Run("cluster", func(t *testing.T) {
		c = Start(t, Options{Nodes: 3, CPUs: 4})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := c.Run(ctx, "srun", "-N", "2", "-n", "2", "-l", "hostname")
		if err != nil {
			t.Fatalf("srun: %v\n%s", err, c.Logs())
		}
		hosts := map[string]bool{}
		for line := range strings.Lines(out) {
			if _, h, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
				hosts[h] = true
			}
		}
		if len(hosts) != 2 {
			t.Fatalf("srun -N 2 hostname printed %q: want two hostnames", out)
		}
		for h := range hosts {
			if !slices.Contains(c.Nodes, h) {
				t.Errorf("hostname %q is none of the nodes %v", h, c.Nodes)
			}
		}
		// A job still running at the end is cancelled by the teardown.
		if _, err := c.Run(ctx, "sbatch", "-N", "3", "-o", "/dev/null", "--wrap", "exec srun sleep 300"); err != nil {
			t.Fatal(err)
		}
	})
	if c == nil || c.Net == nil {
		return
	}
	// The cleanups of the subtest have run.
	for _, h := range c.Net.Hosts {
		if _, err := os.Stat("/run/netns/" + h.NS); err == nil {
			t.Errorf("namespace %s left", h.NS)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + c.Net.Bridge); err == nil {
		t.Errorf("bridge %s left", c.Net.Bridge)
	}
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("processes of the cluster left: %v", left)
	}
	for _, k := range subreaper.Children() {
		if strings.HasSuffix(k, " Z") {
			t.Errorf("zombie child left: %s", k)
		}
	}
}

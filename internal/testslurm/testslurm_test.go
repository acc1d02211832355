package testslurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
		found = found || strings.HasPrefix(l, strconv.Itoa(pid)+" (sleep)")
	}
	if !found {
		t.Errorf("leftovers %q do not include the escaped sleep %d", c.leftovers(), pid)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// TestMultiNode starts a cluster of three namespace nodes: a 2-node srun
// runs on two nodes that report two different hostnames; a node lost
// under a requeueable 2-node batch job is DOWN within seconds and the job
// runs again on the other two; after the teardown no namespace, bridge or
// process of the cluster is left, even as a zombie.
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

		// A node lost under a 2-node job: DOWN, and the job requeued on the others.
		side := t.TempDir()
		out, err = c.Run(ctx, "sbatch", "--parsable", "-N", "2", "-n", "2", "--requeue", "-o", "/dev/null",
			"--wrap", "exec srun sh -c 'touch "+side+"/up-${SLURM_RESTART_COUNT:-0}-$SLURM_PROCID; exec sleep 300'")
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(out)
		nodes := c.awaitRunning(t, ctx, id, 0)
		c.poll(t, 30*time.Second, "both tasks to start", func() error {
			_, err0 := os.Stat(filepath.Join(side, "up-0-0"))
			_, err1 := os.Stat(filepath.Join(side, "up-0-1"))
			return errors.Join(err0, err1)
		})
		lost := slices.Index(c.Nodes, nodes[1])
		start := time.Now()
		if err := c.LoseNode(lost); err != nil {
			t.Fatal(err)
		}
		c.poll(t, 30*time.Second, "the lost node to be down", func() error {
			st, err := c.NodeStates(ctx)
			if err != nil || strings.HasPrefix(st[c.Nodes[lost]], "down") {
				return err
			}
			return fmt.Errorf("node %s is %s", c.Nodes[lost], st[c.Nodes[lost]])
		})
		t.Logf("node %s lost: DOWN after %.1f s", c.Nodes[lost], time.Since(start).Seconds())
		// Released from the requeue's BeginTime hold, as the launcher does.
		c.poll(t, 30*time.Second, "the job requeued", func() error {
			o, err := c.Run(ctx, "scontrol", "show", "job", "-o", id)
			if err != nil || strings.Contains(o, "Restarts=1") {
				return err
			}
			return fmt.Errorf("job %s: %s", id, o)
		})
		again := c.awaitRunning(t, ctx, id, 3*time.Second)
		c.poll(t, 30*time.Second, "both tasks to start again", func() error {
			_, err0 := os.Stat(filepath.Join(side, "up-1-0"))
			_, err1 := os.Stat(filepath.Join(side, "up-1-1"))
			return errors.Join(err0, err1)
		})
		if slices.Contains(again, c.Nodes[lost]) {
			t.Errorf("requeued job runs on %v, the lost node %s among them", again, c.Nodes[lost])
		}
		t.Logf("job %s ran on %v, again on %v %.1f s after the loss", id, nodes, again, time.Since(start).Seconds())
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
}

// awaitRunning waits until job id runs and returns its nodes; release,
// when not zero, is how long after a requeue the job is released from its
// BeginTime hold (scontrol update StartTime=now).
func (c *Cluster) awaitRunning(t *testing.T, ctx context.Context, id string, release time.Duration) []string {
	t.Helper()
	var nodes []string
	first := time.Now()
	c.poll(t, 60*time.Second, "job "+id+" to run", func() error {
		o, err := c.Run(ctx, "scontrol", "show", "job", "-o", id)
		if err != nil {
			return err
		}
		if strings.Contains(o, "Reason=BeginTime") && release > 0 && time.Since(first) > release {
			_, _ = c.Run(ctx, "scontrol", "update", "JobId="+id, "StartTime=now")
		}
		if !strings.Contains(o, "JobState=RUNNING") {
			return fmt.Errorf("job %s: %s", id, o)
		}
		for _, f := range strings.Fields(o) {
			if v, ok := strings.CutPrefix(f, "NodeList="); ok {
				out, err := c.Run(ctx, "scontrol", "show", "hostnames", v)
				if err != nil {
					return err
				}
				nodes = strings.Fields(out)
			}
		}
		return nil
	})
	return nodes
}

package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/subreaper"
	"github.com/scavenger-ml/scavenger/internal/testnet"
	"github.com/scavenger-ml/scavenger/launchers/ssh"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// sshLinkTrial runs faultWorker at 2 workers through the ssh launcher (with
// scavd's defaults: a keepalive every 2 s, a host lost after 5 s without an
// answer) over 3 namespace hosts (internal/testnet, one slot each), its
// ranks meeting over TCP as DDP's collectives do, and cuts the link of the
// host of a random rank at a random time after the first checkpoint. Both
// ranks wait at their next meet; the launcher finds the host lost and stops
// the other rank, and the daemon relaunches the job at 2 workers on the 2
// hosts that answer, from the last checkpoint. The figure is the time from
// the cut to the relaunched attempt's start.
//
// Records lost are the steps of a rank (1 to total) without a record from
// any attempt: a hole in the job's history. The records the cut-off rank
// reported after the cut cannot reach the daemon: they went into its
// forwarded telemetry socket, whose SSH connection the cut broke (the
// network took them). They are of steps after the last checkpoint, which
// the relaunch does again and records (steps done again), so they are not
// lost; the note counts them ("stranded": of the steps the cut-off rank
// reached, those its attempt has no record of). A record of a step up to
// the checkpoint the relaunch starts from that the cut took would be lost
// for good, and is counted.
//
// Left behind: the cut-off rank runs on on its host, waiting at its meet,
// while the host is cut off (the note counts its processes). The trial then
// brings the link back and submits a job on all 3 hosts, which the daemon
// accepts only once the launcher has probed the host again, and the probe
// first kills what the lost attempt left there and removes its telemetry
// directory. The processes of the job alive after that are counted, and
// the telemetry directories left in /tmp with the files. The test process
// is the subreaper of the hosts' orphans (testnet), standing in for a
// host's init: it reaps them before zombies are counted.
//
// It needs root and network namespaces, and skips without them.
func sshLinkTrial(t *testing.T, python string) trialResult {
	const total, every = 600, 40
	tn := testnet.New(t, 3)
	hosts, err := ssh.ParseHosts(tn.Inventory(1))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ssh.New(ssh.Options{Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)).Named("ssh"), Hosts: hosts,
		KeyFiles: []string{tn.KeyFile}, KnownHosts: []string{tn.KnownHosts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	_, c := faultDaemon(t, Config{StateDir: scavdStateDir(t), Launcher: l})
	ctx := context.Background()
	side := t.TempDir()
	j := submitWorkers(t, c, python, side, total, every, false, "tcp")
	rank := rand.IntN(2)
	var host int
	waitFor(t, time.Minute, fmt.Sprintf("rank %d on a host", rank), func() bool {
		host = hostOf(tn, j.ID, 1, rank)
		return host >= 0
	})
	waitFor(t, 2*time.Minute, "the job past its first checkpoint", func() bool {
		last, ok, err := c.LastStep(ctx, j.ID)
		return err == nil && ok && last.Step > every+5
	})
	time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
	before, _, _ := c.LastStep(ctx, j.ID)
	if err := tn.LinkDown(host); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	final := follow(t, c, j.ID, 3*time.Minute)
	if j, err = c.Job(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	a := j.Attempts
	r := trialResult{ok: final.ExitCode != nil && *final.ExitCode == 0 && j.State == api.StateSucceeded && len(a) == 2 &&
		strings.Contains(a[0].EndReason, "lost host "+tn.Hosts[host].Addr) && a[1].Config.Workers == 2 && a[1].Restore != ""}
	if len(a) >= 2 {
		r.figure = a[1].Started.Sub(cut).Seconds()
	}
	reached, stranded := strandedRecords(t, c, j.ID, side, rank)
	cutOff, _, _ := leftovers(j)
	r.note = fmt.Sprintf("host %d (rank %d) cut after step %d; %s after %d attempts", host+1, rank, before.Step, j.State, len(a))
	for _, at := range a {
		from := "the start"
		if at.Restore != "" {
			from = filepath.Base(at.Restore)
		}
		r.note += fmt.Sprintf("; attempt %d at %d workers from %s, steps %d-%d: %s", at.Attempt, at.Config.Workers, from, at.FirstStep, at.LastStep, at.EndReason)
	}
	r.note += fmt.Sprintf("; the cut-off rank reached step %d, %d of its records stranded; %d processes of the job ran while cut off", reached, stranded, cutOff)
	if err := tn.LinkUp(host); err != nil {
		t.Fatal(err)
	}
	var next api.Job
	waitFor(t, time.Minute, "a job on all 3 hosts once the cut-off host answers", func() bool {
		next, err = c.Run(ctx, api.RunRequest{Command: []string{"/bin/true"}, Dir: side, Config: plugins.Config{Workers: 3}})
		return err == nil
	})
	if f := follow(t, c, next.ID, time.Minute); f.ExitCode == nil || *f.ExitCode != 0 {
		r.ok, r.note = false, r.note+"; the job on all 3 hosts failed"
	}
	r.lost, r.dup, r.repeated = countSteps(t, c, j.ID, 2, total)
	// The cut-off rank learns of its end late (its host had no link): what
	// it leaves must be gone within a minute of the link's return.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		subreaper.ReapOrphans()
		r.procs, r.zombies, r.leftover = leftovers(j)
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "scav-"+j.ID+"-a*"))
		r.leftover += len(dirs)
		if r.procs+r.zombies+r.leftover == 0 || time.Now().After(deadline) {
			break
		}
	}
	r.attempts = len(a)
	if len(a) > 0 && a[0].Ended != nil {
		t.Logf("link down -> attempt 1 ended %.1fs -> attempt 2 started %.1fs; %s", a[0].Ended.Sub(cut).Seconds(), r.figure, r.note)
	}
	return r
}

// hostOf is the index of the host of tn that runs rank of job's attempt, or -1.
func hostOf(tn *testnet.Net, job string, attempt, rank int) int {
	for i := range tn.Hosts {
		for _, p := range tn.Procs(i) {
			if p.State != "Z" && p.Getenv(plugins.EnvJobID) == job && p.Getenv(plugins.EnvAttempt) == strconv.Itoa(attempt) &&
				p.Getenv(plugins.EnvRank) == strconv.Itoa(rank) {
				return i
			}
		}
	}
	return -1
}

// strandedRecords is the step rank reached in attempt 1 (the last meet it
// came to: it waits there, cut off) and how many of the steps up to it have
// no record of that attempt and rank.
func strandedRecords(t *testing.T, c *api.Client, job, side string, rank int) (reached, stranded int64) {
	t.Helper()
	marks, _ := filepath.Glob(filepath.Join(side, "at-1-*-"+strconv.Itoa(rank)))
	for _, m := range marks {
		var s, r int64
		if _, err := fmt.Sscanf(filepath.Base(m), "at-1-%d-%d", &s, &r); err == nil {
			reached = max(reached, s)
		}
	}
	seen := map[int64]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Steps(ctx, job, false, func(rec telemetry.StepRecord) error {
		if rec.Attempt == 1 && rec.Rank == rank && rec.Step <= reached {
			seen[rec.Step] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return reached, reached - int64(len(seen))
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Ping asks the daemon who it is.
func (c *Client) Ping(ctx context.Context) (Info, error) {
	var i Info
	return i, c.call(ctx, VerbPing, struct{}{}, &i)
}

// Run submits a job; without a Dir, its workers run in this process's
// working directory (as scavctl's do).
func (c *Client) Run(ctx context.Context, req RunRequest) (Job, error) {
	if req.Dir == "" {
		req.Dir, _ = os.Getwd()
	}
	var j Job
	return j, c.call(ctx, VerbRun, req, &j)
}

// Stop asks the daemon to stop a job; grace 0 uses the job's own.
func (c *Client) Stop(ctx context.Context, id string, grace time.Duration) (Job, error) {
	var j Job
	return j, c.call(ctx, VerbStop, StopRequest{Job: id, Grace: Duration(grace)}, &j)
}

// Move relaunches a running job at cfg; it returns once the workers have
// checkpointed and exited, or the move failed (the job then goes on as it was).
func (c *Client) Move(ctx context.Context, id string, cfg plugins.Config, reason string) (Job, error) {
	var j Job
	return j, c.call(ctx, VerbMove, MoveRequest{Job: id, Config: cfg, Reason: reason}, &j)
}

// Pin moves a running job to cfg (none: where it runs) and pins it there,
// or with pin false releases it: its policy moves a pinned job no more.
func (c *Client) Pin(ctx context.Context, id string, cfg plugins.Config, reason string, pin bool) (Job, error) {
	var j Job
	return j, c.call(ctx, VerbMove, MoveRequest{Job: id, Config: cfg, Reason: reason, Pin: &pin}, &j)
}

// Resume continues a stopped job from its last checkpoint.
func (c *Client) Resume(ctx context.Context, id string, env []string) (Job, error) {
	var j Job
	return j, c.call(ctx, VerbResume, ResumeRequest{Job: id, Env: env}, &j)
}

// Job reads one job's record.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	return j, c.call(ctx, VerbJob, JobRequest{Job: id}, &j)
}

// Jobs lists the caller's job records, oldest first.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var js []Job
	return js, c.call(ctx, VerbJobs, JobsRequest{}, &js)
}

// AllJobs lists every user's job records, oldest first (root only).
func (c *Client) AllJobs(ctx context.Context) ([]Job, error) {
	var js []Job
	return js, c.call(ctx, VerbJobs, JobsRequest{All: true}, &js)
}

// List reads a page of the job index: the summaries of the jobs req asks
// for (their records with req.Records), oldest first.
func (c *Client) List(ctx context.Context, req JobsRequest) (JobPage, error) {
	var p JobPage
	return p, c.call(ctx, VerbList, req, &p)
}

// Resolve reads the record of the job ref names: its id, its name (the
// newest job of that name) or a prefix of its id no other job shares,
// among the caller's jobs (every user's with all, for root).
func (c *Client) Resolve(ctx context.Context, ref string, all bool) (Resolved, error) {
	var r Resolved
	return r, c.call(ctx, VerbResolve, ResolveRequest{Ref: ref, All: all}, &r)
}

// Keep exempts a job from the retention of finished jobs (undo: no longer)
// and returns its summary.
func (c *Client) Keep(ctx context.Context, id string, undo bool) (JobSummary, error) {
	var s JobSummary
	return s, c.call(ctx, VerbKeep, KeepRequest{Job: id, Undo: undo}, &s)
}

// StepDigest reads what job's step records add up to, up to the newest.
func (c *Client) StepDigest(ctx context.Context, job string) (StepDigest, error) {
	var d StepDigest
	return d, c.call(ctx, VerbStepDigest, JobRequest{Job: job}, &d)
}

// ReportAllocation tells the daemon that a scheduler allocation began or
// ended on its node, and returns its record.
func (c *Client) ReportAllocation(ctx context.Context, ev AllocationEvent) (Allocation, error) {
	var a Allocation
	return a, c.call(ctx, VerbAllocation, ev, &a)
}

// Allocations lists the scheduler allocations the hooks reported, newest first.
func (c *Client) Allocations(ctx context.Context) ([]Allocation, error) {
	var as []Allocation
	return as, c.call(ctx, VerbAllocations, struct{}{}, &as)
}

// Stats reads the daemon's counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	return s, c.call(ctx, VerbStats, struct{}{}, &s)
}

// Steps replays job's step records, oldest first. Without follow it
// returns once the records that existed when it started are delivered; with
// follow it goes on (across a daemon restart) until ctx is done or fn fails.
func (c *Client) Steps(ctx context.Context, job string, follow bool, fn func(telemetry.StepRecord) error) error {
	return c.StepsIn(ctx, job, StepRange{}, follow, fn)
}

// StepRange narrows a replay of a job's step records to its newest: the
// Last records, or else those stored since Since. The zero value is the
// whole history.
type StepRange struct {
	Last  int
	Since time.Time
}

// query adds the range to a stream request.
func (r StepRange) query(q url.Values) url.Values {
	if r.Last > 0 {
		q.Set("last", strconv.Itoa(r.Last))
	}
	if !r.Since.IsZero() {
		q.Set("since", strconv.FormatInt(r.Since.UnixNano(), 10))
	}
	return q
}

// StepsIn is Steps for the records of job in r only: the daemon reads no
// more of the history than they need.
func (c *Client) StepsIn(ctx context.Context, job string, r StepRange, follow bool, fn func(telemetry.StepRecord) error) error {
	return c.follow(ctx, r.query(url.Values{"what": {StreamSteps}, "job": {job}}), follow, stepFrames(fn))
}

// stepFrames hands fn each record of each frame.
func stepFrames(fn func(telemetry.StepRecord) error) func(Frame) error {
	return func(f Frame) error {
		recs, _ := telemetry.DecodeBatch([]byte(f.Data))
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}
}

// Output replays job's worker output and lifecycle events in the order they
// happened; exactly one of the two arguments of fn is non-nil. follow is
// as for Steps.
func (c *Client) Output(ctx context.Context, job string, follow bool, fn func(*telemetry.LogLine, *telemetry.Event) error) error {
	logSubj, tailSubj := telemetry.LogSubject(job), telemetry.LogTailSubject(job)
	return c.follow(ctx, url.Values{"what": {StreamOutput}, "job": {job}}, follow, func(f Frame) error {
		if f.Subject == logSubj || f.Subject == tailSubj {
			var l telemetry.LogLine
			if err := json.Unmarshal([]byte(f.Data), &l); err != nil {
				return nil // not a line this build can read; skip it
			}
			return fn(&l, nil)
		}
		var e telemetry.Event
		if err := json.Unmarshal([]byte(f.Data), &e); err != nil {
			return nil
		}
		return fn(nil, &e)
	})
}

// LastStep returns the newest step record of job, or ok=false when it has none.
func (c *Client) LastStep(ctx context.Context, job string) (rec telemetry.StepRecord, ok bool, err error) {
	err = c.follow(ctx, url.Values{"what": {StreamLastStep}, "job": {job}}, false, func(f Frame) error {
		if recs, _ := telemetry.DecodeBatch([]byte(f.Data)); len(recs) > 0 {
			rec, ok = recs[len(recs)-1], true
		}
		return nil
	})
	if err != nil {
		return rec, false, fmt.Errorf("read last step of %s: %w", job, err)
	}
	return rec, ok, nil
}

// NodeSamples replays the node samples of node (every node when empty) and
// kind (telemetry.NodeGPU, telemetry.NodeHost, or both when empty), oldest
// first; follow is as for Steps. Samples this build cannot decode are skipped.
func (c *Client) NodeSamples(ctx context.Context, node, kind string, follow bool, fn func(telemetry.NodeSample) error) error {
	return c.follow(ctx, url.Values{"what": {StreamNodes}, "node": {node}, "kind": {kind}}, follow, nodeSamples(fn))
}

// LatestNodeSamples delivers the newest node sample of each node and kind,
// then, with follow, every new one until ctx is done or fn fails. Samples
// this build cannot decode are skipped.
func (c *Client) LatestNodeSamples(ctx context.Context, follow bool, fn func(telemetry.NodeSample) error) error {
	return c.follow(ctx, url.Values{"what": {StreamNodesLatest}}, follow, nodeSamples(fn))
}

// NodeSamplesSince delivers every node's samples of kind (both kinds when
// empty) taken since from, oldest first, and returns. Samples this build
// cannot decode are skipped.
func (c *Client) NodeSamplesSince(ctx context.Context, kind string, from time.Time, fn func(telemetry.NodeSample) error) error {
	q := url.Values{"what": {StreamNodesSince}, "kind": {kind}, "since": {strconv.FormatInt(from.UnixNano(), 10)}}
	return c.follow(ctx, q, false, nodeSamples(fn))
}

// nodeSamples hands fn each frame that decodes as a node sample and skips
// the others (written by a newer build, or damaged).
func nodeSamples(fn func(telemetry.NodeSample) error) func(Frame) error {
	return func(f Frame) error {
		s, err := telemetry.DecodeNodeSample([]byte(f.Data))
		if err != nil {
			return nil
		}
		return fn(s)
	}
}

// StepFeed delivers live step records until it is closed.
type StepFeed struct {
	cancel context.CancelFunc
	done   chan struct{}
	last   chan time.Time // when the newest record arrived; buffered 1
}

// FollowSteps calls fn with every step record of job published from now
// on (every job's the caller may read when job is empty), from the feed's
// goroutine: fn must not block. It returns once the feed is following.
// Close the feed to stop.
func (c *Client) FollowSteps(job string, fn func(telemetry.StepRecord)) (*StepFeed, error) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &StepFeed{cancel: cancel, done: make(chan struct{}), last: make(chan time.Time, 1)}
	ready := make(chan error, 1)
	go func() { // owned by the feed: Close cancels and joins it
		defer close(f.done)
		started := false
		err := c.follow(ctx, url.Values{"what": {StreamLive}, "job": {job}}, true, func(fr Frame) error {
			if fr.Seq == 0 && fr.Subject == "" { // the daemon's word that the feed follows
				if !started {
					started = true
					ready <- nil
				}
				return nil
			}
			recs, _ := telemetry.DecodeBatch([]byte(fr.Data))
			for _, r := range recs {
				fn(r)
			}
			select {
			case <-f.last:
			default:
			}
			f.last <- time.Now()
			return nil
		})
		if !started {
			ready <- err
		}
	}()
	if err := <-ready; err != nil {
		f.Close()
		return nil, fmt.Errorf("follow steps of %q: %w", job, err)
	}
	return f, nil
}

// Drain waits, for a second at most, until the records published so far
// have been delivered: until none has come for a tenth of a second.
func (f *StepFeed) Drain() {
	deadline := time.After(time.Second)
	for {
		select {
		case <-f.last:
		case <-time.After(100 * time.Millisecond):
			return
		case <-deadline:
			return
		}
	}
}

// Close stops the feed and waits for its goroutine.
func (f *StepFeed) Close() {
	f.cancel()
	<-f.done
}

// Endpoints are where a running daemon's API may answer, in order: the
// socket of stateDir, then the system daemon's.
func Endpoints(stateDir string) []string {
	out := []string{filepath.Join(stateDir, SocketName)}
	if sys := filepath.Join(SystemStateDir, SocketName); sys != out[0] {
		out = append(out, sys)
	}
	return out
}

// DialFirst connects to the first of endpoints whose daemon answers within
// timeout (and ctx); the error joins why each did not.
func DialFirst(ctx context.Context, endpoints []string, timeout time.Duration) (*Client, error) {
	var errs []error
	for _, e := range endpoints {
		if _, err := os.Stat(e); err != nil && !isURL(e) {
			errs = append(errs, fmt.Errorf("%w at %s: no socket", ErrNoDaemon, e))
			continue
		}
		c, err := Dial(ctx, e, timeout)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func isURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http")
}

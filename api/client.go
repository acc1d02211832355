package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Client is a connection to a daemon. Its methods are the API: the
// request/reply verbs, the jobs' step, output and node histories, and live
// step records.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// Dial connects to the NATS server at url and checks that a scavd answers there.
func Dial(ctx context.Context, url string, timeout time.Duration) (*Client, error) {
	nc, err := nats.Connect(url, nats.Name("scavctl"), nats.Timeout(timeout), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open jetstream at %s: %w", url, err)
	}
	c := &Client{nc: nc, js: js}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Ping(pctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, url, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// URL is the daemon's address as connected, without credentials.
func (c *Client) URL() string { return c.nc.ConnectedUrlRedacted() }

// Connected reports whether the connection is up now (it reconnects by
// itself after a daemon restart on the same address).
func (c *Client) Connected() bool { return c.nc.IsConnected() }

// call sends one API request and decodes the answer into out.
func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout(verb)+5*time.Second)
		defer cancel()
	}
	m, err := c.nc.RequestWithContext(ctx, telemetry.APISubject(verb), body)
	if err != nil {
		return fmt.Errorf("%s request: %w", verb, err)
	}
	var rep Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return fmt.Errorf("decode %s reply: %w", verb, err)
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	if out != nil {
		if err := json.Unmarshal(rep.Data, out); err != nil {
			return fmt.Errorf("decode %s reply: %w", verb, err)
		}
	}
	return nil
}

// Ping asks the daemon who it is.
func (c *Client) Ping(ctx context.Context) (Info, error) {
	var i Info
	return i, c.call(ctx, VerbPing, struct{}{}, &i)
}

// Run submits a job.
func (c *Client) Run(ctx context.Context, req RunRequest) (Job, error) {
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

// Jobs lists every job record, oldest first.
func (c *Client) Jobs(ctx context.Context) ([]Job, error) {
	var js []Job
	return js, c.call(ctx, VerbJobs, struct{}{}, &js)
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

// Steps replays job's step records; see telemetry.Replay for follow.
func (c *Client) Steps(ctx context.Context, job string, follow bool, fn func(telemetry.StepRecord) error) error {
	return telemetry.Replay(ctx, c.js, telemetry.StepStream, []string{telemetry.StepSubject(job)}, follow, func(m jetstream.Msg) error {
		recs, _ := telemetry.DecodeBatch(m.Data())
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// Output replays job's worker output and lifecycle events in the order they
// happened; exactly one of the two arguments of fn is non-nil. See
// telemetry.Replay for follow.
func (c *Client) Output(ctx context.Context, job string, follow bool, fn func(*telemetry.LogLine, *telemetry.Event) error) error {
	logSubj := telemetry.LogSubject(job)
	subjects := []string{logSubj, telemetry.EventSubject(job)}
	return telemetry.Replay(ctx, c.js, telemetry.OutputStream, subjects, follow, func(m jetstream.Msg) error {
		if m.Subject() == logSubj {
			var l telemetry.LogLine
			if err := json.Unmarshal(m.Data(), &l); err != nil {
				return nil // not a line this build can read; skip it
			}
			return fn(&l, nil)
		}
		var e telemetry.Event
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			return nil
		}
		return fn(nil, &e)
	})
}

// LastStep returns the newest step record of job, or ok=false when it has none.
func (c *Client) LastStep(ctx context.Context, job string) (rec telemetry.StepRecord, ok bool, err error) {
	s, err := c.js.Stream(ctx, telemetry.StepStream)
	if err != nil {
		return rec, false, fmt.Errorf("open stream %s: %w", telemetry.StepStream, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, telemetry.StepSubject(job))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("read last step of %s: %w", job, err)
	}
	recs, _ := telemetry.DecodeBatch(m.Data)
	if len(recs) == 0 {
		return rec, false, nil
	}
	return recs[len(recs)-1], true, nil
}

// NodeSamples replays the node samples of node (every node when empty) and
// kind (telemetry.NodeGPU, telemetry.NodeHost, or both when empty), oldest
// first; see telemetry.Replay for follow. Messages this build cannot decode
// are skipped.
func (c *Client) NodeSamples(ctx context.Context, node, kind string, follow bool, fn func(telemetry.NodeSample) error) error {
	kinds := []string{telemetry.NodeGPU, telemetry.NodeHost}
	if kind != "" {
		kinds = []string{kind}
	}
	n := "*"
	if node != "" {
		n = telemetry.SubjectNode(node)
	}
	subjects := make([]string, 0, len(kinds))
	for _, k := range kinds {
		subjects = append(subjects, telemetry.NodeSubject(n, k))
	}
	return telemetry.Replay(ctx, c.js, telemetry.NodeStream, subjects, follow, nodeSamples(fn))
}

// LatestNodeSamples delivers the newest node sample of each node and kind,
// then, with follow, every new one until ctx is done or fn fails; see
// telemetry.ReplayLast. Messages this build cannot decode are skipped.
func (c *Client) LatestNodeSamples(ctx context.Context, follow bool, fn func(telemetry.NodeSample) error) error {
	subjects := []string{telemetry.AllNodeGPU, telemetry.AllNodeHost}
	return telemetry.ReplayLast(ctx, c.js, telemetry.NodeStream, subjects, follow, nodeSamples(fn))
}

// NodeSamplesSince delivers every node's samples of kind (both kinds when
// empty) taken since from, oldest first, and returns; see
// telemetry.ReplaySince. Messages this build cannot decode are skipped.
func (c *Client) NodeSamplesSince(ctx context.Context, kind string, from time.Time, fn func(telemetry.NodeSample) error) error {
	subjects := []string{telemetry.AllNodeGPU, telemetry.AllNodeHost}
	if kind != "" {
		subjects = []string{telemetry.NodeSubject("*", kind)}
	}
	return telemetry.ReplaySince(ctx, c.js, telemetry.NodeStream, subjects, from, nodeSamples(fn))
}

// nodeSamples hands fn each message that decodes as a node sample and skips
// the others (written by a newer build, or damaged).
func nodeSamples(fn func(telemetry.NodeSample) error) func(jetstream.Msg) error {
	return func(m jetstream.Msg) error {
		s, err := telemetry.DecodeNodeSample(m.Data())
		if err != nil {
			return nil
		}
		return fn(s)
	}
}

// StepFeed delivers live step records until it is closed.
type StepFeed struct {
	nc  *nats.Conn
	sub *nats.Subscription
}

// FollowSteps calls fn with every step record of job published from now
// on (every job's when job is empty), on the connection's goroutine: fn
// must not block. Close the feed to stop.
func (c *Client) FollowSteps(job string, fn func(telemetry.StepRecord)) (*StepFeed, error) {
	subj := telemetry.AllSteps
	if job != "" {
		subj = telemetry.StepSubject(job)
	}
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		recs, _ := telemetry.DecodeBatch(m.Data)
		for _, r := range recs {
			fn(r)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow steps on %s: %w", subj, err)
	}
	return &StepFeed{nc: c.nc, sub: sub}, nil
}

// Drain waits, for a second at most, until the records published so far
// have been delivered.
func (f *StepFeed) Drain() { telemetry.Drain(f.nc, f.sub) }

// Close stops the feed.
func (f *StepFeed) Close() { _ = f.sub.Unsubscribe() }

// DaemonURLs are where a running daemon may answer, in order: the discovery
// files of stateDir and of /var/lib/scavenger, then the default address.
func DaemonURLs(stateDir string) []string {
	var urls []string
	for _, dir := range []string{stateDir, "/var/lib/scavenger"} {
		if info, err := ReadDiscovery(dir); err == nil {
			urls = append(urls, info.NATS)
		}
	}
	return append(urls, "nats://"+DefaultListen)
}

// DialFirst connects to the first of urls whose daemon answers within
// timeout (and ctx); the error joins why each did not.
func DialFirst(ctx context.Context, urls []string, timeout time.Duration) (*Client, error) {
	var errs []error
	for _, u := range urls {
		c, err := Dial(ctx, u, timeout)
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

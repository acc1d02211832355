package daemon

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

// ErrNoDaemon is returned when no scavd answers at the address tried.
var ErrNoDaemon = errors.New("no scavd reachable")

// Client is scavctl's view of a daemon: the API and the job's history.
type Client struct {
	NC *nats.Conn
	JS jetstream.JetStream
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
	c := &Client{NC: nc, JS: js}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Ping(pctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, url, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() { c.NC.Close() }

// call sends one API request and decodes the answer into out.
func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, apiTimeout(verb)+5*time.Second)
		defer cancel()
	}
	m, err := c.NC.RequestWithContext(ctx, telemetry.APISubject(verb), body)
	if err != nil {
		return fmt.Errorf("%s request: %w", verb, err)
	}
	var rep reply
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
	return telemetry.Replay(ctx, c.JS, telemetry.StepStream, []string{telemetry.StepSubject(job)}, follow, func(m jetstream.Msg) error {
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
	return telemetry.Replay(ctx, c.JS, telemetry.OutputStream, subjects, follow, func(m jetstream.Msg) error {
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
	s, err := c.JS.Stream(ctx, telemetry.StepStream)
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

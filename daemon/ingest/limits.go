package ingest

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// Limits bound what the socket takes, per user (the uid the kernel gives
// for a connection's process) and per job, so that no user can starve
// another: connections, step bytes, wrong tokens, idle connections. Zero
// fields take DefaultLimits'. Root's connections (uid 0: root's own jobs,
// and the SSH launcher's forwarded ones, which the daemon makes itself)
// are bound by the per-job and the total caps only.
type Limits struct {
	// Conns is the most connections open at once in all (the file
	// descriptors the socket may take).
	Conns int
	// ConnsPerUser is the most one user may hold open, bound or not.
	ConnsPerUser int
	// ConnsPerJob is the most a hello may bind to one job.
	ConnsPerJob int
	// StepBytesPerSecond and StepBurst bound the step records one user's
	// connections hand to the store: a token bucket of StepBurst bytes
	// filled at StepBytesPerSecond. A user past it waits (their workers
	// queue, nothing is lost); the wait is counted.
	StepBytesPerSecond float64
	StepBurst          float64
	// BadTokens and BadTokenBurst bound the hellos with a wrong token one
	// user may make: a bucket of BadTokenBurst refilled at BadTokens a
	// second. Past it, that user's connections are refused until it
	// refills. Every wrong token is counted and logged (at most a line a
	// second per user).
	BadTokens     float64
	BadTokenBurst float64
	// HelloTimeout is how long a connection may stay unbound (no hello
	// with its attempt's token); IdleTimeout how long a bound one may go
	// without a line (the python client writes an empty line every
	// KeepaliveEvery when it has nothing else to say).
	HelloTimeout, IdleTimeout time.Duration
	// Grace is how long records are still taken on a connection whose
	// attempt has ended (the last records of workers that just exited).
	Grace time.Duration
}

// DefaultLimits hold against the floods of issue 20 and leave a real job
// far inside them: a 64-rank job at 100 steps a second writes 2.5 MB/s
// on one node.
var DefaultLimits = Limits{
	Conns: 16384, ConnsPerUser: 1024, ConnsPerJob: 512,
	StepBytesPerSecond: 4 << 20, StepBurst: 32 << 20,
	BadTokens: 2, BadTokenBurst: 20,
	HelloTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
	Grace: 10 * time.Second,
}

// KeepaliveEvery is how often the python client writes an empty line on a
// connection that has nothing else to carry; IdleTimeout must be well
// above it.
const KeepaliveEvery = 30 * time.Second

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *float64, def float64) {
		if *v <= 0 {
			*v = def
		}
	}
	pickInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pickDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	pickInt(&l.Conns, d.Conns)
	pickInt(&l.ConnsPerUser, d.ConnsPerUser)
	pickInt(&l.ConnsPerJob, d.ConnsPerJob)
	pick(&l.StepBytesPerSecond, d.StepBytesPerSecond)
	pick(&l.StepBurst, d.StepBurst)
	pick(&l.BadTokens, d.BadTokens)
	pick(&l.BadTokenBurst, d.BadTokenBurst)
	pickDur(&l.HelloTimeout, d.HelloTimeout)
	pickDur(&l.IdleTimeout, d.IdleTimeout)
	pickDur(&l.Grace, d.Grace)
	return l
}

// Attempt is what the daemon knows of a running attempt: what its records
// may say.
type Attempt struct {
	// Workers is the attempt's number of workers: no record names a
	// larger world.
	Workers int
	// StartStep is the step the attempt went on from; Started when it
	// started. No step is above StartStep plus one a microsecond since,
	// and no time or duration before it (less Skew).
	StartStep int64
	Started   time.Time
}

// Attempts says whether job's attempt runs now (here, or on another node
// of the cluster), and what its records may say; false once it has ended.
type Attempts func(ctx context.Context, job string, attempt int) (Attempt, bool)

// Skew is how far a record's time may lie outside its attempt's life
// (clocks of the processes of one node agree far better than this).
const Skew = 10 * time.Minute

// check refuses a record its attempt cannot have made by now: any kind
// whose world is above the attempt's workers; a step whose step, time or
// duration lies outside the attempt's life (a hello's, an ack's and a
// notice's step and time are the worker's word, not stored as steps).
func (a Attempt) check(r *telemetry.StepRecord, now time.Time) error {
	if a.Workers > 0 && r.World > a.Workers {
		return fmt.Errorf("world %d: the attempt has %d workers", r.World, a.Workers)
	}
	if !r.IsStep() {
		return nil
	}
	age := now.Sub(a.Started) + Skew
	earliest := float64(a.Started.Add(-Skew).UnixNano()) / 1e9
	latest := float64(now.Add(Skew).UnixNano()) / 1e9
	maxStep := a.maxStep(now)
	switch {
	case r.Step > maxStep:
		return fmt.Errorf("step %d: the attempt started at step %d %s ago, so it is at most at step %d", r.Step, a.StartStep, now.Sub(a.Started).Round(time.Millisecond), maxStep)
	case r.Time < earliest || r.Time > latest:
		return fmt.Errorf("time %.3f outside the attempt's life (%.3f to %.3f)", r.Time, earliest, latest)
	case r.Seconds > age.Seconds():
		return fmt.Errorf("dt %g s: the attempt is %s old", r.Seconds, now.Sub(a.Started).Round(time.Millisecond))
	}
	return nil
}

// maxStep is the highest step the attempt can have reached by now: one a
// microsecond since it started (less Skew).
func (a Attempt) maxStep(now time.Time) int64 {
	age := now.Sub(a.Started) + Skew
	return a.StartStep + min(int64(age/time.Microsecond), math.MaxInt64-a.StartStep)
}

// bucket is a token bucket: n tokens, refilled at rate a second up to burst.
type bucket struct {
	n    float64
	last time.Time
}

// fill brings b up to now.
func (b *bucket) fill(now time.Time, rate, burst float64) {
	if b.last.IsZero() {
		b.n = burst
	} else {
		b.n = min(burst, b.n+now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
}

// user is what the socket holds of one user.
type user struct {
	conns     int       // connections open
	steps     bucket    // step bytes
	tokens    bucket    // wrong tokens
	badTotal  int64     // wrong tokens, in all
	lastWarn  time.Time // the last log line of a wrong token
	warnAfter int64     // badTotal at lastWarn
}

// userOf returns uid's state, making it; in.mu must be held.
func (in *Server) userOf(uid uint32) *user {
	u := in.users[uid]
	if u == nil {
		u = &user{}
		in.users[uid] = u
	}
	return u
}

// admit takes a new connection of uid, or says why not; in.mu must be held.
func (in *Server) admit(p *peer) (reason string, ok bool) {
	switch {
	case len(in.open) >= in.limits.Conns:
		return dropTooMany, false
	case !p.cred:
		return "", true
	}
	u := in.userOf(p.uid)
	if p.uid != 0 && u.conns >= in.limits.ConnsPerUser {
		return RefusedUserConns, false
	}
	if !in.mayGuess(u, time.Now()) {
		return RefusedBadTokens, false
	}
	u.conns++
	return "", true
}

// release forgets a connection admit took; in.mu must be held.
func (in *Server) release(p *peer) {
	if u := in.users[p.uid]; p.cred && u != nil {
		u.conns--
	}
}

// mayTryToken says whether p's user may have another hello's token checked:
// not while they are past BadTokenBurst.
func (in *Server) mayTryToken(p *peer) bool {
	if !p.cred {
		return true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mayGuess(in.userOf(p.uid), time.Now())
}

// mayGuess says whether u has a wrong token left in their bucket now, which
// it refills first (in.mu held).
func (in *Server) mayGuess(u *user, now time.Time) bool {
	u.tokens.fill(now, in.limits.BadTokens, in.limits.BadTokenBurst)
	return u.tokens.n >= 1
}

// badToken counts a hello with a wrong token and logs it (a line a second
// per user, with the count); false once the user is past BadTokenBurst:
// the connection is then ended.
func (in *Server) badToken(p *peer, hello telemetry.StepRecord) bool {
	in.drop(DropUnbound, fmt.Sprintf("hello of job %s attempt %d without its token", hello.Job, hello.Attempt))
	if !p.cred {
		return true
	}
	now := time.Now()
	in.mu.Lock()
	u := in.userOf(p.uid)
	u.tokens.fill(now, in.limits.BadTokens, in.limits.BadTokenBurst)
	u.tokens.n--
	u.badTotal++
	ok := u.tokens.n >= 1
	var since int64
	logIt := now.Sub(u.lastWarn) >= time.Second
	if logIt {
		since, u.lastWarn, u.warnAfter = u.badTotal-u.warnAfter, now, u.badTotal
	}
	total := u.badTotal
	in.mu.Unlock()
	if logIt {
		in.log.Warn("telemetry hello with a wrong token", zap.Uint32("uid", p.uid), zap.Int32("pid", p.pid),
			zap.String("job", hello.Job), zap.Int("attempt", hello.Attempt), zap.Int64("since_last_line", since),
			zap.Int64("total", total), zap.Bool("refused_for_a_while", !ok))
	}
	if !ok {
		in.refuse(RefusedBadTokens)
	}
	return ok
}

// mayHand says whether p's user may hand more step records now (the
// poller reads a connection only then; root's are not bound). A user past
// the bound is counted once each time their connections start waiting.
func (in *Server) mayHand(p *peer) bool {
	if !p.cred || p.uid == 0 {
		return true
	}
	in.mu.Lock()
	b := &in.userOf(p.uid).steps
	b.fill(time.Now(), in.limits.StepBytesPerSecond, in.limits.StepBurst)
	ok := b.n >= 0
	in.mu.Unlock()
	if !ok && !p.throttled {
		in.refuse(RefusedStepBytes)
		in.warn(RefusedStepBytes, fmt.Sprintf("uid %d writes step records faster than %.0f bytes/s: its connections wait", p.uid, in.limits.StepBytesPerSecond))
	}
	p.throttled = !ok
	return ok
}

// throttle takes n bytes of step records off p's user's bound: a
// connection the poller reads pays (mayHand let it read); any other waits
// until its user may hand them (root's are not bound). False when the
// server closes first.
func (in *Server) throttle(p *peer, n int) bool {
	if !p.cred || p.uid == 0 {
		return true
	}
	if p.conn != nil { // the poller reads it
		in.mu.Lock()
		in.userOf(p.uid).steps.n -= float64(n)
		in.mu.Unlock()
		return true
	}
	waited := false
	for {
		now := time.Now()
		in.mu.Lock()
		b := &in.userOf(p.uid).steps
		b.fill(now, in.limits.StepBytesPerSecond, in.limits.StepBurst)
		if b.n >= 0 {
			b.n -= float64(n) // a batch above the burst goes through, and is paid for after
			in.mu.Unlock()
			return true
		}
		wait := time.Duration(-b.n / in.limits.StepBytesPerSecond * float64(time.Second))
		in.mu.Unlock()
		if !waited {
			waited = true
			in.refuse(RefusedStepBytes)
			in.warn(RefusedStepBytes, fmt.Sprintf("uid %d writes step records faster than %.0f bytes/s: its connections wait", p.uid, in.limits.StepBytesPerSecond))
		}
		select {
		case <-in.closing.Done():
			return false
		case <-time.After(max(wait, time.Millisecond)):
		}
	}
}

// refuse counts a connection refused, ended or held back by a bound.
func (in *Server) refuse(reason string) { in.refused[reason].Add(1) }

// Reasons a connection is refused, ended or held back; they label
// IngestStats.Refused (and the scavenger_telemetry_refused_total metric).
const (
	// RefusedUserConns: the user holds Limits.ConnsPerUser connections.
	RefusedUserConns = "user_connections"
	// RefusedJobConns: a hello would bind more than Limits.ConnsPerJob.
	RefusedJobConns = "job_connections"
	// RefusedBadTokens: the user made too many hellos with a wrong token.
	RefusedBadTokens = "bad_tokens"
	// RefusedNoHello: no hello with a valid token within HelloTimeout.
	RefusedNoHello = "no_hello"
	// RefusedIdle: a bound connection was silent for IdleTimeout.
	RefusedIdle = "idle"
	// RefusedEnded: a hello named an attempt that has ended (or never
	// ran): the connection is ended, so that a worker whose attempt is
	// about to be reattached tries again.
	RefusedEnded = "attempt_not_running"
	// RefusedStepBytes: a user's connections waited for the step-byte
	// bound (counted once a wait).
	RefusedStepBytes = "step_bytes"
)

// RefusedReasons are the reasons Stats counts refusals under.
var RefusedReasons = []string{RefusedUserConns, RefusedJobConns, RefusedBadTokens, RefusedNoHello, RefusedIdle, RefusedEnded, RefusedStepBytes}

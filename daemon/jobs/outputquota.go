package jobs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// The output history is one stream, bounded in bytes, that drops its oldest
// messages when full: without more, one user's jobs that print enough would
// push every other user's output out of it. So each user's output in it is
// bounded too (Options.OutputPerUser): every line a job publishes is charged
// to its owner (api.OutputStats.Bytes, kept in the job record); past the
// bound, the owner's oldest finished job's output is purged from the
// history (only the owner's: api.OutputStats.Purged), and when no finished
// job of theirs is left, the running jobs' new lines are dropped, counted
// and said so in the job's output. A job's own limits (outputcap.go) keep
// one job under a few MiB, well under the default quota: only a user's many
// jobs meet it. The counts are this node's: each node bounds what the jobs
// it runs publish.

// DefaultOutputPerUser bounds one user's output in the history: an eighth
// of the output stream's default size.
const DefaultOutputPerUser = 32 << 20

// DefaultOutputReadRate bounds how fast the daemon takes one user's jobs' output,
// all their jobs together, in bytes a second (outputReadBurst at once): past
// it, the jobs' output readers wait, so that a job that prints without end
// waits on its writes, as on a slow terminal, instead of costing the daemon
// the CPU to read and drop what it prints (which other users' requests
// would wait for). It is what one job's tail is published at.
const (
	DefaultOutputReadRate = 1 << 20
	outputReadBurst       = 1 << 20
	readLineCost          = 1 << 10
)

// outputQuota charges jobs' output to their owners.
type outputQuota struct {
	g     *Registry
	limit int64
	read  rate.Limit // bytes a second of a user's output read (0: no bound)

	mu    sync.Mutex
	users map[uint32]*userOutput
	reads map[uint32]*rate.Limiter
}

// userOutput is one user's output in the history: bytes in all, and the
// finished jobs whose output may be purged, oldest first.
type userOutput struct {
	used     int64
	finished []jobBytes
}

// jobBytes is a job's output in the history.
type jobBytes struct {
	job   string
	bytes int64
}

// uidOf is the uid output of a job of owner is charged to.
func uidOf(owner *api.Owner) uint32 {
	if owner == nil {
		return 0
	}
	return owner.UID
}

// user returns uid's account, read from the job records on first use.
func (q *outputQuota) user(ctx context.Context, uid uint32) *userOutput {
	if u := q.users[uid]; u != nil {
		return u
	}
	u := &userOutput{}
	q.users[uid] = u
	js, err := q.g.List(ctx)
	if err != nil {
		q.g.log.Warn("read the output quota's jobs", zap.Error(err))
		return u
	}
	slices.SortFunc(js, func(a, b api.Job) int { return a.Created.Compare(b.Created) })
	for _, j := range js {
		if uidOf(j.Owner) != uid || j.Output == nil || j.Output.Purged || j.Node != q.g.o.Node {
			continue
		}
		u.used += j.Output.Bytes
		if j.State.Done() && q.g.running(j.ID) == nil {
			u.finished = append(u.finished, jobBytes{j.ID, j.Output.Bytes})
		}
	}
	return u
}

// take charges n bytes of job's output to owner; false when they do not
// fit under the quota even after purging the owner's finished jobs' output.
func (q *outputQuota) take(owner *api.Owner, job string, n int64) bool {
	if q == nil || q.limit <= 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(q.g.shutdown, 10*time.Second)
	defer cancel()
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.user(ctx, uidOf(owner))
	for u.used+n > q.limit && len(u.finished) > 0 {
		old := u.finished[0]
		if old.job == job {
			break
		}
		u.finished = u.finished[1:]
		u.used -= old.bytes
		q.purge(ctx, old.job)
	}
	if u.used+n > q.limit {
		return false
	}
	u.used += n
	return true
}

// wait holds back the reader of a line of n bytes of a job of owner while
// the owner's jobs print faster than the read rate (until the daemon stops).
func (q *outputQuota) wait(owner *api.Owner, n int) {
	if q == nil || q.read <= 0 {
		return
	}
	uid := uidOf(owner)
	q.mu.Lock()
	if q.reads == nil {
		q.reads = map[uint32]*rate.Limiter{}
	}
	lim := q.reads[uid]
	if lim == nil {
		lim = rate.NewLimiter(q.read, outputReadBurst)
		q.reads[uid] = lim
	}
	q.mu.Unlock()
	_ = lim.WaitN(q.g.kill, min(n, outputReadBurst))
}

// ended moves job's bytes to its owner's finished jobs, whose output may
// be purged.
func (q *outputQuota) ended(owner *api.Owner, job string, bytes int64) {
	if q == nil || q.limit <= 0 || bytes == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if u := q.users[uidOf(owner)]; u != nil && !slices.ContainsFunc(u.finished, func(f jobBytes) bool { return f.job == job }) {
		u.finished = append(u.finished, jobBytes{job, bytes})
	}
}

// purge removes a finished job's output lines from the history (its
// events stay) and marks its record.
func (q *outputQuota) purge(ctx context.Context, job string) {
	g := q.g
	log := g.log.With(zap.String("job", job))
	s, err := g.js.Stream(ctx, telemetry.OutputStream)
	if err == nil {
		for _, subj := range []string{telemetry.LogSubject(job), telemetry.LogTailSubject(job)} {
			if perr := s.Purge(ctx, jetstream.WithPurgeSubject(subj)); perr != nil {
				err = perr
			}
		}
	}
	if err != nil {
		log.Warn("purge a job's output for its owner's quota", zap.Error(err))
		return
	}
	rec, err := load(ctx, g.o.KV, job)
	if err == nil && rec.job.Output != nil && g.running(job) == nil {
		rec.job.Output.Purged = true
		_, err = rec.commit(ctx)
	}
	if err != nil {
		log.Warn("record a job's output purged", zap.Error(err))
	}
	log.Info("output purged from the history: its owner's newer jobs passed the output quota", zap.Int64("quota_bytes", q.limit))
}

// quotaNote is the line a job's output gets where its owner's quota made
// the daemon drop lines.
func quotaNote(limit int64) string {
	return fmt.Sprintf("scavd: this job's owner has %d MiB of output in the history, the most one user may (output_mib_per_user), with no finished job of theirs left to make room: lines dropped from here on", limit>>20)
}

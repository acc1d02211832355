package jobs

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Retention bounds the jobs a node keeps. A job that has ended leaves the
// job index and the store — its record, step records, output, events and
// step digest — once it ended more than MaxAge ago, or once the node holds
// more than MaxJobs jobs and it is among the oldest that ended; a job
// `scavctl keep` marked stays (and still counts). Its checkpoints are the
// user's and stay where they are.
type Retention struct {
	MaxAge  time.Duration
	MaxJobs int
}

// DefaultRetention keeps the jobs that ended in the last 90 days, at most
// 10,000 jobs a node.
var DefaultRetention = Retention{MaxAge: 90 * 24 * time.Hour, MaxJobs: 10_000}

// Expired chooses the jobs of ended (jobs that ended and are not kept, of a
// node that holds all jobs) that leave at now, oldest first. Zero fields
// of r take the defaults.
func (r Retention) Expired(ended []api.JobSummary, all int, now time.Time) []api.JobSummary {
	if r.MaxAge <= 0 {
		r.MaxAge = DefaultRetention.MaxAge
	}
	if r.MaxJobs <= 0 {
		r.MaxJobs = DefaultRetention.MaxJobs
	}
	rs := append([]api.JobSummary(nil), ended...)
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].Before(rs[b]) })
	over := all - r.MaxJobs // the oldest that ended go first
	var out []api.JobSummary
	for _, s := range rs {
		end := s.Created
		if s.Ended != nil {
			end = *s.Ended
		}
		if over > 0 || now.Sub(end) > r.MaxAge {
			out = append(out, s)
			over--
		}
	}
	return out
}

// Sweep removes the jobs of this node that r says leave at now, and
// returns how many left. A job running here again (resumed) stays.
func (g *Registry) Sweep(ctx context.Context, r Retention, now time.Time) (int, error) {
	ended, all := g.o.Index.Ended(g.o.Node)
	n := 0
	for _, s := range r.Expired(ended, all, now) {
		if g.running(s.ID) != nil {
			continue
		}
		if err := g.forget(ctx, s.ID); err != nil {
			return n, err
		}
		n++
	}
	if n > 0 {
		// The purges leave markers in the bucket: they go (no one
		// watches the bucket of records), so that it counts its records
		// (jobindex.Open compares).
		if err := g.o.KV.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
			g.log.Warn("remove the markers of removed job records", zap.Error(err))
		}
		g.log.Info("jobs past their retention removed", zap.Int("jobs", n), zap.Duration("job_retention", r.MaxAge), zap.Int("job_history", r.MaxJobs))
	}
	return n, nil
}

// forget removes job id from the store: its step records, output and
// events, step digest and record, and last its summary, so that a sweep
// cut short finds it again.
func (g *Registry) forget(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	for _, stream := range []string{telemetry.StepStream, telemetry.OutputStream} {
		s, err := g.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("forget job %s: open stream %s: %w", id, stream, err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(telemetry.JobSubjects(id))); err != nil {
			return fmt.Errorf("forget job %s: purge its subjects of %s: %w", id, stream, err)
		}
	}
	if g.o.Digests != nil {
		if err := g.o.Digests.Delete(ctx, id); err != nil {
			return fmt.Errorf("forget job %s: %w", id, err)
		}
	}
	if err := g.o.KV.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("forget job %s: remove its record: %w", id, err)
	}
	return g.o.Index.Delete(ctx, id)
}

// removeEmptyCheckpointDir removes the checkpoint directory the daemon made
// for job j under its checkpoint root (not one the job named) when the job
// ended without a checkpoint in it: else every job that never checkpointed
// left an empty directory behind. rmdir(2) removes only an empty directory
// and follows no link, whoever owns the directory.
func (g *Registry) removeEmptyCheckpointDir(j api.Job) {
	if g.o.CheckpointRoot == "" || j.CheckpointDir != filepath.Join(g.o.CheckpointRoot, j.ID) {
		return
	}
	if err := unix.Rmdir(j.CheckpointDir); err == nil {
		g.log.Debug("empty checkpoint directory removed", zap.String("job", j.ID), zap.String("dir", j.CheckpointDir))
	}
}

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Index is what the API needs of the job index (jobindex.Index): pages of
// summaries, a job named as a person names it, summaries by id, keep marks.
type Index interface {
	List(req api.JobsRequest, who api.Owner) (api.JobPage, error)
	Resolve(ref string, who api.Owner, all bool) (api.JobSummary, string, error)
	Get(id string) (api.JobSummary, bool)
	Keep(ctx context.Context, id string, undo bool) error
}

// Digests is what the API needs of the jobs' step digests
// (aggregates.Store): a job's, up to date, and where its last records start.
type Digests interface {
	Current(ctx context.Context, j api.Job) (api.StepDigest, error)
	Start(ctx context.Context, j api.Job, last int64) (after uint64, skip int64, err error)
}

// jobsRequest decodes a listing's request (an empty body is the caller's
// whole list) and checks that who may make it.
func jobsRequest(verb string, body []byte, who api.Owner) (api.JobsRequest, error) {
	var req api.JobsRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decode(verb, body, &req); err != nil {
			return req, err
		}
	}
	if req.All && !who.Root() {
		return req, fmt.Errorf("%w: only root lists every user's jobs", ErrForbidden)
	}
	return req, nil
}

// page reads the page of the job index req asks for, with the jobs'
// records when it asks for them.
func (s *Server) page(ctx context.Context, who api.Owner, req api.JobsRequest) (api.JobPage, error) {
	p, err := s.o.Index.List(req, who)
	if err != nil || !req.Records {
		return p, err
	}
	p.Records = make([]api.Job, 0, len(p.Jobs))
	for _, sum := range p.Jobs {
		j, err := s.o.Jobs.Get(ctx, sum.ID)
		if err != nil {
			continue // removed since the page was read
		}
		p.Records = append(p.Records, j)
	}
	p.Jobs = nil
	return p, nil
}

// jobs lists the records of the caller's jobs (root: every user's, with
// All) that the request's filters keep, oldest first.
func (s *Server) jobs(ctx context.Context, who api.Owner, body []byte) (any, error) {
	req, err := jobsRequest(api.VerbJobs, body, who)
	if err != nil {
		return nil, err
	}
	req.Records = true
	p, err := s.page(ctx, who, req)
	if err != nil {
		return nil, err
	}
	return p.Records, nil
}

// list serves a page of the job index.
func (s *Server) list(ctx context.Context, who api.Owner, body []byte) (any, error) {
	req, err := jobsRequest(api.VerbList, body, who)
	if err != nil {
		return nil, err
	}
	return s.page(ctx, who, req)
}

// resolve names a job by its id (refused when it is another user's), or a
// job of the caller's (root: every user's, with All) by name or id prefix,
// and reads its record.
func (s *Server) resolve(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.ResolveRequest
	if err := decode(api.VerbResolve, body, &req); err != nil {
		return nil, err
	}
	if req.All && !who.Root() {
		return nil, fmt.Errorf("%w: only root names every user's jobs", ErrForbidden)
	}
	if telemetry.ValidJobID(req.Ref) {
		// A job's id names it, whoever's it is (another user's is refused
		// as such, as a read of it by id is), and even before the index
		// has it (a record another daemon wrote a moment ago).
		j, err := s.owned(ctx, who, req.Ref, "read")
		if !errors.Is(err, api.ErrNoJob) {
			return api.Resolved{Job: j}, err
		}
	}
	sum, note, err := s.o.Index.Resolve(req.Ref, who, req.All)
	if err != nil {
		return nil, err
	}
	j, err := s.owned(ctx, who, sum.ID, "read")
	if err != nil {
		return nil, err
	}
	return api.Resolved{Job: j, Note: note}, nil
}

// keep sets or clears the keep mark of a job the caller owns (root: any).
func (s *Server) keep(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.KeepRequest
	if err := decode(api.VerbKeep, body, &req); err != nil {
		return nil, err
	}
	what := "keep"
	if req.Undo {
		what = "stop keeping"
	}
	if _, err := s.owned(ctx, who, req.Job, what); err != nil {
		return nil, err
	}
	if err := s.o.Index.Keep(ctx, req.Job, req.Undo); err != nil {
		return nil, err
	}
	sum, _ := s.o.Index.Get(req.Job)
	return sum, nil
}

// stepDigest serves what a job's step records add up to.
func (s *Server) stepDigest(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.JobRequest
	if err := decode(api.VerbStepDigest, body, &req); err != nil {
		return nil, err
	}
	j, err := s.owned(ctx, who, req.Job, "read")
	if err != nil {
		return nil, err
	}
	return s.o.Digests.Current(ctx, j)
}

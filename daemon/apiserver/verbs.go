package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
)

// ErrForbidden is a request its caller may not make.
var ErrForbidden = errors.New("permission denied")

// verb handles one request/reply verb for caller, with the request's body.
type verb func(ctx context.Context, caller api.Owner, body []byte) (any, error)

// verbs are the request/reply verbs by name.
func (s *Server) verbs() map[string]verb {
	return map[string]verb{
		api.VerbPing: func(ctx context.Context, who api.Owner, _ []byte) (any, error) { return s.info(ctx, who), nil },
		api.VerbStats: func(ctx context.Context, who api.Owner, _ []byte) (any, error) {
			return api.Stats{Info: s.info(ctx, who), Ingest: s.o.Ingest()}, nil
		},
		api.VerbRun:         s.run,
		api.VerbStop:        s.stop,
		api.VerbJob:         s.job,
		api.VerbJobs:        s.jobs,
		api.VerbResume:      s.resume,
		api.VerbMove:        s.move,
		api.VerbAllocation:  s.allocation,
		api.VerbAllocations: s.allocations,
		api.VerbModels:      s.models,
		api.VerbForgetModel: s.forgetModel,
		api.VerbOffers:      s.offers,
		api.VerbDashboard:   s.dashboardLink,
		api.VerbList:        s.list,
		api.VerbResolve:     s.resolve,
		api.VerbKeep:        s.keep,
		api.VerbStepDigest:  s.stepDigest,
	}
}

// offers is what the daemon's launcher offers now: any identified caller
// may read it (it is the same for all, and names no job).
func (s *Server) offers(ctx context.Context, _ api.Owner, _ []byte) (any, error) {
	if s.o.Offers == nil {
		return api.Offers{}, nil
	}
	o, err := s.o.Offers(ctx)
	if err != nil {
		return nil, fmt.Errorf("the launcher's offers: %w", err)
	}
	return o, nil
}

// dashboardLink hands the caller a one-time login link to the dashboard,
// bound to them.
func (s *Server) dashboardLink(ctx context.Context, who api.Owner, _ []byte) (any, error) {
	if s.o.UI == nil {
		return nil, fmt.Errorf("%w: this scavd serves no dashboard (dashboard_listen is empty)", api.ErrBadRequest)
	}
	return s.o.UI.Link(ctx, who)
}

// routes is the API's handler.
func (s *Server) routes() http.Handler {
	verbs := s.verbs()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathCall+"{verb}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("verb")
		v, ok := verbs[name]
		if !ok {
			reply(w, http.StatusNotFound, nil, fmt.Errorf("%w: no verb %q", api.ErrBadRequest, name))
			return
		}
		s.call(w, r, name, v)
	})
	mux.HandleFunc("GET "+api.PathStream, s.stream)
	return mux
}

// info describes the daemon to who: its running jobs are those who may
// read (root: all), so that ping and stats name no other user's job.
func (s *Server) info(ctx context.Context, who api.Owner) api.Info {
	i := s.o.Info()
	mine := []string{}
	for _, id := range i.Active {
		if s.owners.readable(ctx, who, id) {
			mine = append(mine, id)
		}
	}
	i.Active = mine
	return i
}

// call runs a verb for the request's caller and writes its reply.
func (s *Server) call(w http.ResponseWriter, r *http.Request, name string, v verb) {
	who, err := callerOf(r.Context())
	if err != nil {
		reply(w, http.StatusUnauthorized, nil, err)
		return
	}
	body, err := s.readBody(w, r, name)
	if err != nil {
		reply(w, status(err), nil, err)
		return
	}
	s.writeWithin(w, api.Timeout(name))
	ctx, cancel := context.WithTimeout(r.Context(), api.Timeout(name))
	defer cancel()
	data, err := v(ctx, who, body)
	if err != nil {
		s.log.Debug("api error", zap.String("verb", name), zap.String("user", who.User), zap.Error(err))
	}
	reply(w, status(err), data, err)
}

// status is the HTTP status of a verb's error.
func status(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrNoIdentity):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, api.ErrNoJob):
		return http.StatusNotFound
	case errors.Is(err, api.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooMany):
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// reply writes the API's envelope: the data, or the error.
func reply(w http.ResponseWriter, code int, data any, err error) {
	var rep api.Reply
	if err != nil {
		rep.Error = err.Error()
	} else if b, merr := json.Marshal(data); merr != nil {
		code, rep.Error = http.StatusInternalServerError, fmt.Sprintf("encode reply: %v", merr)
	} else {
		rep.Data = b
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(rep)
}

// decode reads a verb's request.
func decode(name string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: decode %s request: %w", api.ErrBadRequest, name, err)
	}
	return nil
}

// run submits a job owned by the caller. A daemon that is not root runs
// only its own user's jobs.
func (s *Server) run(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.RunRequest
	if err := decode(api.VerbRun, body, &req); err != nil {
		return nil, err
	}
	if !s.self.Root() && who.UID != s.self.UID {
		return nil, fmt.Errorf("%w: this scavd runs as %s and runs only %[2]s's jobs; use your own (scavctl starts one by itself) or the node's system scavd",
			ErrForbidden, s.self.User)
	}
	return s.o.Jobs.Submit(ctx, req, who)
}

// owned reads job id for who: it must be theirs, or who is root.
func (s *Server) owned(ctx context.Context, who api.Owner, id, what string) (api.Job, error) {
	j, err := s.o.Jobs.Get(ctx, id)
	if err != nil {
		return j, err
	}
	if !who.Owns(j) {
		return api.Job{}, fmt.Errorf("%w: %s job %s: it is %s's; only they or root may", ErrForbidden, what, id, ownerName(j))
	}
	return j, nil
}

// ownerName names a job's owner for messages.
func ownerName(j api.Job) string {
	if j.Owner == nil {
		return "root"
	}
	return j.Owner.User
}

// onJob serves a request that acts on one job: it decodes verb's request,
// checks that who may act on the job it names (what names the act in a
// refusal) and runs act on this node, or forwards the request to the daemon
// of the job's node.
func onJob[R any](ctx context.Context, s *Server, who api.Owner, verb, what string, body []byte, job func(R) string, act func(R) (api.Job, error)) (any, error) {
	var req R
	if err := decode(verb, body, &req); err != nil {
		return nil, err
	}
	j, err := s.owned(ctx, who, job(req), what)
	if err != nil {
		return nil, err
	}
	if s.elsewhere(j) {
		return s.forward(ctx, j.Node, verb, who, body)
	}
	return act(req)
}

func (s *Server) stop(ctx context.Context, who api.Owner, body []byte) (any, error) {
	return onJob(ctx, s, who, api.VerbStop, "stop", body, func(r api.StopRequest) string { return r.Job },
		func(r api.StopRequest) (api.Job, error) { return s.o.Jobs.Stop(r.Job, r.Grace.D()) })
}

func (s *Server) job(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.JobRequest
	if err := decode(api.VerbJob, body, &req); err != nil {
		return nil, err
	}
	return s.owned(ctx, who, req.Job, "read")
}

func (s *Server) resume(ctx context.Context, who api.Owner, body []byte) (any, error) {
	return onJob(ctx, s, who, api.VerbResume, "resume", body, func(r api.ResumeRequest) string { return r.Job },
		func(r api.ResumeRequest) (api.Job, error) { return s.o.Jobs.Resume(ctx, r.Job, r.Env, who) })
}

func (s *Server) move(ctx context.Context, who api.Owner, body []byte) (any, error) {
	return onJob(ctx, s, who, api.VerbMove, "move", body, func(r api.MoveRequest) string { return r.Job },
		func(r api.MoveRequest) (api.Job, error) {
			if r.Reason == "" {
				r.Reason = "requested"
			}
			if r.Pin != nil {
				return s.o.Jobs.Pin(ctx, r.Job, r.Config, r.Reason, *r.Pin)
			}
			return s.o.Jobs.Move(ctx, r.Job, r.Config, r.Reason)
		})
}

// allocation records a scheduler hook's report: root's (slurmd runs the
// hooks as root) or the daemon's own user's.
func (s *Server) allocation(ctx context.Context, who api.Owner, body []byte) (any, error) {
	if !who.Root() && who.UID != s.self.UID {
		return nil, fmt.Errorf("%w: only root (the scheduler's hooks) reports allocations", ErrForbidden)
	}
	var ev api.AllocationEvent
	if err := decode(api.VerbAllocation, body, &ev); err != nil {
		return nil, err
	}
	if ev.Event != api.AllocationBegin && ev.Event != api.AllocationEnd {
		return nil, fmt.Errorf("%w: allocation event %q: use %q or %q", api.ErrBadRequest, ev.Event, api.AllocationBegin, api.AllocationEnd)
	}
	return s.o.Allocations.Report(ctx, ev)
}

// allocations lists the scheduler allocations of the caller (root: all).
func (s *Server) allocations(ctx context.Context, who api.Owner, _ []byte) (any, error) {
	all, err := s.o.Allocations.List(ctx)
	if err != nil || who.Root() {
		return all, err
	}
	mine := []api.Allocation{}
	for _, a := range all {
		if a.UID == int(who.UID) {
			mine = append(mine, a)
		}
	}
	return mine, nil
}

package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// serveAPI subscribes the request/reply handlers; the subscriptions end with the connection.
func (d *Daemon) serveAPI(nc *nats.Conn) error {
	handlers := map[string]func(ctx context.Context, body []byte) (any, error){
		api.VerbPing: func(context.Context, []byte) (any, error) { return d.info(), nil },
		api.VerbStats: func(context.Context, []byte) (any, error) {
			return api.Stats{Info: d.info(), Ingest: d.ingest.Stats()}, nil
		},
		api.VerbRun: func(ctx context.Context, body []byte) (any, error) {
			var req api.RunRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode run request: %w", api.ErrBadRequest, err)
			}
			return d.jobs.Submit(ctx, req)
		},
		api.VerbStop: func(_ context.Context, body []byte) (any, error) {
			var req api.StopRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode stop request: %w", api.ErrBadRequest, err)
			}
			return d.jobs.Stop(req.Job, req.Grace.D())
		},
		api.VerbJob: func(ctx context.Context, body []byte) (any, error) {
			var req api.JobRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode job request: %w", api.ErrBadRequest, err)
			}
			return d.jobs.Get(ctx, req.Job)
		},
		api.VerbJobs: func(ctx context.Context, _ []byte) (any, error) { return d.jobs.List(ctx) },
		api.VerbResume: func(ctx context.Context, body []byte) (any, error) {
			var req api.ResumeRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode resume request: %w", api.ErrBadRequest, err)
			}
			return d.jobs.Resume(ctx, req.Job, req.Env)
		},
		api.VerbAllocation: func(ctx context.Context, body []byte) (any, error) {
			var ev api.AllocationEvent
			if err := json.Unmarshal(body, &ev); err != nil {
				return nil, fmt.Errorf("%w: decode allocation event: %w", api.ErrBadRequest, err)
			}
			if ev.Event != api.AllocationBegin && ev.Event != api.AllocationEnd {
				return nil, fmt.Errorf("%w: allocation event %q: use %q or %q", api.ErrBadRequest, ev.Event, api.AllocationBegin, api.AllocationEnd)
			}
			return d.allocs.Report(ctx, ev)
		},
		api.VerbAllocations: func(ctx context.Context, _ []byte) (any, error) { return d.allocs.List(ctx) },
		api.VerbMove: func(ctx context.Context, body []byte) (any, error) {
			var req api.MoveRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode move request: %w", api.ErrBadRequest, err)
			}
			if req.Reason == "" {
				req.Reason = "requested"
			}
			return d.jobs.Move(ctx, req.Job, req.Config, req.Reason)
		},
	}
	for verb, h := range handlers {
		h := h
		verb := verb
		_, err := nc.QueueSubscribe(telemetry.APISubject(verb), "scavd", func(m *nats.Msg) {
			ctx, cancel := context.WithTimeout(d.root, api.Timeout(verb))
			defer cancel()
			var rep api.Reply
			data, err := h(ctx, m.Data)
			if err != nil {
				rep.Error = err.Error()
				d.log.Debug("api error", zap.String("verb", verb), zap.Error(err))
			} else if rep.Data, err = json.Marshal(data); err != nil {
				rep.Error = fmt.Sprintf("encode %s reply: %v", verb, err)
			}
			b, _ := json.Marshal(rep)
			if err := m.Respond(b); err != nil {
				d.log.Warn("api respond", zap.String("verb", verb), zap.Error(err))
			}
		})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", telemetry.APISubject(verb), err)
		}
	}
	return nil
}

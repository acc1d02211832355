package daemon

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// serveAPI subscribes the request/reply handlers; the subscriptions end with the connection.
func (d *Daemon) serveAPI(nc *nats.Conn) error {
	handlers := map[string]func(ctx context.Context, body []byte) (any, error){
		VerbPing: func(context.Context, []byte) (any, error) { return d.info(), nil },
		VerbStats: func(context.Context, []byte) (any, error) {
			return Stats{Info: d.info(), Ingest: d.ingest.Stats()}, nil
		},
		VerbRun: func(ctx context.Context, body []byte) (any, error) {
			var req RunRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode run request: %w", ErrBadRequest, err)
			}
			return d.sup.submit(ctx, req)
		},
		VerbStop: func(_ context.Context, body []byte) (any, error) {
			var req StopRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode stop request: %w", ErrBadRequest, err)
			}
			return d.sup.stopJob(req.Job, req.Grace.D())
		},
		VerbJob: func(ctx context.Context, body []byte) (any, error) {
			var req JobRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode job request: %w", ErrBadRequest, err)
			}
			return getJob(ctx, d.store.Jobs, req.Job)
		},
		VerbJobs: func(ctx context.Context, _ []byte) (any, error) { return listJobs(ctx, d.store.Jobs) },
		VerbResume: func(ctx context.Context, body []byte) (any, error) {
			var req ResumeRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode resume request: %w", ErrBadRequest, err)
			}
			return d.sup.resume(ctx, req.Job, req.Env)
		},
		VerbAllocation: func(ctx context.Context, body []byte) (any, error) {
			var ev AllocationEvent
			if err := json.Unmarshal(body, &ev); err != nil {
				return nil, fmt.Errorf("%w: decode allocation event: %w", ErrBadRequest, err)
			}
			if ev.Event != AllocationBegin && ev.Event != AllocationEnd {
				return nil, fmt.Errorf("%w: allocation event %q: use %q or %q", ErrBadRequest, ev.Event, AllocationBegin, AllocationEnd)
			}
			return d.allocs.report(ctx, ev)
		},
		VerbAllocations: func(ctx context.Context, _ []byte) (any, error) { return d.allocs.list(ctx) },
		VerbMove: func(ctx context.Context, body []byte) (any, error) {
			var req MoveRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return nil, fmt.Errorf("%w: decode move request: %w", ErrBadRequest, err)
			}
			if req.Reason == "" {
				req.Reason = "requested"
			}
			return d.sup.moveJob(ctx, req.Job, req.Config, req.Reason)
		},
	}
	for verb, h := range handlers {
		h := h
		verb := verb
		_, err := nc.QueueSubscribe(telemetry.APISubject(verb), "scavd", func(m *nats.Msg) {
			ctx, cancel := context.WithTimeout(context.Background(), apiTimeout(verb))
			defer cancel()
			var rep reply
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

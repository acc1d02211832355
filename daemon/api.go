package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// ErrBadRequest marks a request the daemon refused because of its content.
var ErrBadRequest = errors.New("bad request")

// API verbs served on scav.api.<verb>.
const (
	VerbPing   = "ping"
	VerbRun    = "run"
	VerbStop   = "stop"
	VerbJob    = "job"
	VerbJobs   = "jobs"
	VerbStats  = "stats"
	VerbMove   = "move"
	VerbResume = "resume"
	// VerbAllocation reports a scheduler allocation's begin or end (prolog/epilog hooks).
	VerbAllocation = "allocation"
	// VerbAllocations lists the allocations the hooks reported.
	VerbAllocations = "allocations"
)

// ResumeRequest asks the daemon to continue a stopped job from its last
// checkpoint (the body of scav.api.resume); Env is the workers' environment.
type ResumeRequest struct {
	Job string   `json:"job"`
	Env []string `json:"env,omitempty"`
}

// MoveRequest asks the daemon to relaunch a running job at another
// configuration (the body of scav.api.move). The reply comes once the
// workers have checkpointed and exited, or the move has failed.
type MoveRequest struct {
	Job    string         `json:"job"`
	Config plugins.Config `json:"config"`
	Reason string         `json:"reason,omitempty"`
}

// StopRequest asks the daemon to stop a job (the body of scav.api.stop).
type StopRequest struct {
	Job   string   `json:"job"`
	Grace Duration `json:"grace,omitempty"`
}

// JobRequest names a job (the body of scav.api.job).
type JobRequest struct {
	Job string `json:"job"`
}

// Info describes a daemon (the answer to scav.api.ping and part of stats).
type Info struct {
	Node       string   `json:"node"`
	Version    string   `json:"version"`
	PID        int      `json:"pid"`
	Standalone bool     `json:"standalone"`
	Socket     string   `json:"socket"`
	NATS       string   `json:"nats"`
	Active     []string `json:"active"`
	// Metrics is the address of the Prometheus endpoint, when it is served.
	Metrics string `json:"metrics,omitempty"`
}

// Stats is the answer to scav.api.stats.
type Stats struct {
	Info   Info        `json:"info"`
	Ingest IngestStats `json:"ingest"`
}

// apiTimeout bounds a request's work; a move waits for the workers to checkpoint.
func apiTimeout(verb string) time.Duration {
	if verb == VerbMove {
		return 10 * time.Minute
	}
	return 10 * time.Second
}

// reply is the envelope of every API answer.
type reply struct {
	Error string          `json:"error,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
}

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

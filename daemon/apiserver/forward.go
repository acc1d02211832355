package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
)

// In a cluster every node's daemon reads every job's record, but only the
// daemon of a job's node can stop, move or resume it. A request for a job of
// another node is forwarded there over NATS (which only daemons can reach),
// with the caller the asking daemon vouched for; the job's daemon checks it
// again as its own callers'.

// forwardPrefix is the subject prefix of the requests forwarded to a node's
// daemon: forwardPrefix + node + "." + verb.
const forwardPrefix = "scav.daemon."

// forwarded is a request forwarded to the daemon of a job's node.
type forwarded struct {
	Caller api.Owner       `json:"caller"`
	Body   json.RawMessage `json:"body"`
}

// serveForwarded answers the requests other daemons forward to this node.
func (s *Server) serveForwarded(verbs map[string]verb) error {
	if s.o.NC == nil || s.o.Node == "" {
		return nil
	}
	subj := forwardPrefix + s.o.Node + ".*"
	sub, err := s.o.NC.Subscribe(subj, func(m *nats.Msg) {
		name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		var rep api.Reply
		var f forwarded
		v, ok := verbs[name]
		switch err := json.Unmarshal(m.Data, &f); {
		case err != nil:
			rep.Error = fmt.Sprintf("decode forwarded %s: %v", name, err)
		case !ok:
			rep.Error = fmt.Sprintf("no verb %q", name)
		default:
			ctx, cancel := context.WithTimeout(s.base, api.Timeout(name))
			data, err := v(ctx, f.Caller, f.Body)
			cancel()
			if err != nil {
				rep.Error = err.Error()
			} else {
				rep.Data, _ = json.Marshal(data)
			}
		}
		b, _ := json.Marshal(rep)
		if err := m.Respond(b); err != nil {
			s.log.Warn("answer a forwarded request", zap.String("verb", name), zap.Error(err))
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subj, err)
	}
	s.forwardSub = sub
	return nil
}

// elsewhere reports whether job j runs under another node's daemon.
func (s *Server) elsewhere(j api.Job) bool {
	return j.Node != "" && s.o.Node != "" && j.Node != s.o.Node
}

// forward sends verb's request to the daemon of node for who and returns
// its answer as out.
func (s *Server) forward(ctx context.Context, node, name string, who api.Owner, body []byte) (json.RawMessage, error) {
	b, _ := json.Marshal(forwarded{Caller: who, Body: body})
	m, err := s.o.NC.RequestWithContext(ctx, forwardPrefix+node+"."+name, b)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("the job runs on node %s, whose scavd does not answer", node)
	}
	if err != nil {
		return nil, fmt.Errorf("forward %s to node %s: %w", name, node, err)
	}
	var rep api.Reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return nil, fmt.Errorf("decode %s answer of node %s: %w", name, node, err)
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	return rep.Data, nil
}

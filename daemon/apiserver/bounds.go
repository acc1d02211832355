package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/connlimit"
)

// What one user may hold of the API, and everyone together, so that no
// user can starve another or the daemon of file descriptors or memory:
// connections are counted as they are accepted (internal/connlimit) per user
// (on the unix socket, the peer credentials' uid; on TCP, the peer's
// address, since the token comes later) and in all on each listener;
// streams are counted per user (the caller); a request's body must arrive
// within BodyTimeout, a keep-alive connection is closed after IdleTimeout
// without a request, and a reply or a stream frame the peer does not take
// within WriteTimeout ends its connection. A caller past a bound is told
// which, by how much and the setting that raises it, and the refusal is
// counted (Counts, scavenger_api_refused_total).

// Limits bound what the API keeps open. Zero values take DefaultLimits'.
type Limits struct {
	// MaxConns bounds the connections of each listener in all;
	// ConnsPerUser those of one user (or, on TCP, of one address).
	MaxConns, ConnsPerUser int
	// StreamsPerUser bounds the streams (logs -f, top, attach, steps)
	// one user has open at once.
	StreamsPerUser int
	// BodyTimeout bounds the time a request's body takes to arrive,
	// IdleTimeout a keep-alive connection's wait for its next request, and
	// WriteTimeout the time a peer takes to take a reply or a frame.
	BodyTimeout, IdleTimeout, WriteTimeout time.Duration
}

// DefaultLimits hold against one user's flood of 20,000 connections,
// follow streams or slow bodies (make bench-security): some 64 KiB a
// stream, a few KiB a connection, within a daemon's file descriptors.
func DefaultLimits() Limits {
	return Limits{MaxConns: 4096, ConnsPerUser: 64, StreamsPerUser: 32,
		BodyTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
}

// withDefaults fills l's zero values with DefaultLimits'.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, d *int }{{&l.MaxConns, &d.MaxConns}, {&l.ConnsPerUser, &d.ConnsPerUser}, {&l.StreamsPerUser, &d.StreamsPerUser}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *time.Duration }{{&l.BodyTimeout, &d.BodyTimeout}, {&l.IdleTimeout, &d.IdleTimeout}, {&l.WriteTimeout, &d.WriteTimeout}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return l
}

// Reasons a request is refused for a bound (the label of the metric).
const (
	RefusedConns        = connlimit.ReasonTotal
	RefusedConnsPerUser = connlimit.ReasonPerKey
	RefusedStreams      = "streams_per_user"
	RefusedBody         = "body_timeout"
)

// ErrTooMany is a request past one of the API's bounds.
var ErrTooMany = errors.New("too many")

// Counts are what the API holds open and what it refused, by reason.
type Counts struct {
	Conns, Streams int
	Refused        map[string]int64
}

// bounds keeps the counts of the API's bounds.
type bounds struct {
	l         Limits
	listeners []*connlimit.Listener
	mu        sync.Mutex
	streams   map[uint32]int
	open      int
	refused   sync.Map // reason -> *atomic.Int64
}

// refuse counts a refusal for reason.
func (b *bounds) refuse(reason string) {
	v, _ := b.refused.LoadOrStore(reason, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// Counts reports what the API holds open and what it refused.
func (s *Server) Counts() Counts {
	b := &s.bounds
	c := Counts{Refused: map[string]int64{}}
	for _, ln := range b.listeners {
		c.Conns += ln.Open()
	}
	b.mu.Lock()
	c.Streams = b.open
	b.mu.Unlock()
	for _, r := range []string{RefusedConns, RefusedConnsPerUser, RefusedStreams, RefusedBody} {
		c.Refused[r] = 0
	}
	b.refused.Range(func(k, v any) bool {
		c.Refused[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return c
}

// bound wraps a listener in the connection bounds; a unix socket's
// connections are the peer's user's, a TCP listener's the peer's address'.
func (s *Server) bound(ln net.Listener) net.Listener {
	key := func(c net.Conn) string {
		if cred, err := peerCred(c); err == nil {
			return "uid " + strconv.FormatUint(uint64(cred.Uid), 10)
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		return "address " + host
	}
	l := connlimit.New(ln, connlimit.Options{
		Max: s.bounds.l.MaxConns, PerKey: s.bounds.l.ConnsPerUser, Key: key,
		Refused: func(key, reason string) {
			s.bounds.refuse(reason)
			s.log.Debug("connection refused", zap.String("peer", key), zap.String("bound", reason))
		},
		Message: s.refusal,
	})
	s.bounds.listeners = append(s.bounds.listeners, l)
	return l
}

// refusal is the HTTP answer to a connection past a bound.
func (s *Server) refusal(key, reason string, open, limit int) []byte {
	who := key
	if uid, ok := strings.CutPrefix(key, "uid "); ok {
		if n, err := strconv.ParseUint(uid, 10, 32); err == nil {
			if o, err := s.users.byID(uint32(n), 0); err == nil {
				who = "user " + o.User
			}
		}
	}
	msg := fmt.Sprintf("%v: scavd has %d API connections open, its limit (api_limits.max_conns %d): try again later", ErrTooMany, open, limit)
	if reason == connlimit.ReasonPerKey {
		msg = fmt.Sprintf("%v: %s has %d API connections open to scavd, the limit (api_limits.conns_per_user) is %d: close some (each scavctl logs -f, attach or top holds one)",
			ErrTooMany, who, open, limit)
	}
	body, _ := json.Marshal(api.Reply{Error: msg})
	return fmt.Appendf(nil, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// openStream counts a stream of who's in, or refuses it past the bound;
// the function returned counts it out.
func (s *Server) openStream(who api.Owner) (func(), error) {
	b := &s.bounds
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams == nil {
		b.streams = map[uint32]int{}
	}
	if n := b.streams[who.UID]; n >= b.l.StreamsPerUser {
		b.refuse(RefusedStreams)
		return nil, fmt.Errorf("%w: %s has %d streams open on scavd, the limit (api_limits.streams_per_user) is %d: end some (scavctl logs -f, attach, top)",
			ErrTooMany, who.User, n, b.l.StreamsPerUser)
	}
	b.streams[who.UID]++
	b.open++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.open--
		if b.streams[who.UID]--; b.streams[who.UID] <= 0 {
			delete(b.streams, who.UID)
		}
	}, nil
}

// readBody reads a request's body within BodyTimeout (and 16 MiB).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, name string) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.bounds.l.BodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The connection ends after the answer: the server would otherwise
		// wait for the rest of the body to reuse it.
		_ = r.Body.Close()
		w.Header().Set("Connection", "close")
		s.bounds.refuse(RefusedBody)
		return nil, fmt.Errorf("%w: the body of the %s request did not arrive within %s (api_limits.body_timeout)", ErrTooMany, name, s.bounds.l.BodyTimeout)
	}
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("%w: read %s request: %w", api.ErrBadRequest, name, err)
	}
	return body, nil
}

// writeWithin gives the writes of a reply or frame WriteTimeout from now
// (after wait, the time the answer may take to make).
func (s *Server) writeWithin(w http.ResponseWriter, wait time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.bounds.l.WriteTimeout))
}

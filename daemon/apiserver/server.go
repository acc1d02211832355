// Package apiserver serves scavd's API (api/) over HTTP: on a unix socket,
// where the kernel vouches for the caller (peer credentials, as Docker's and
// systemd's sockets do), and optionally on TCP, only with TLS and a bearer
// token that the API's token file maps to a user. It owns who may do what:
// every request has a caller; a user acts on and reads only their own jobs,
// root on every one; a daemon that is not root runs only its own user's
// jobs. Nothing answers an anonymous client.
package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/netaddr"
	"github.com/scavenger-ml/scavenger/internal/unixsock"
	"github.com/scavenger-ml/scavenger/plugins"
)

// Jobs is what the API needs of the job registry.
type Jobs interface {
	Submit(ctx context.Context, req api.RunRequest, owner api.Owner) (api.Job, error)
	Resume(ctx context.Context, id string, env []string, by api.Owner) (api.Job, error)
	Get(ctx context.Context, id string) (api.Job, error)
	Stop(id string, grace time.Duration) (api.Job, error)
	Move(ctx context.Context, id string, cfg plugins.Config, reason string) (api.Job, error)
	Pin(ctx context.Context, id string, cfg plugins.Config, reason string, pin bool) (api.Job, error)
}

// Allocations is what the API needs of the allocation records.
type Allocations interface {
	Report(ctx context.Context, ev api.AllocationEvent) (api.Allocation, error)
	List(ctx context.Context) ([]api.Allocation, error)
}

// Options configure a Server.
type Options struct {
	Log         *zap.Logger
	Jobs        Jobs
	Allocations Allocations
	// Models is the model store (nil: none; the models verbs say so).
	Models Models
	// Index lists and names the jobs; Digests sums up their step records.
	Index   Index
	Digests Digests
	// JS reads the histories; NC follows live step records.
	JS jetstream.JetStream
	NC *nats.Conn
	// Node names this daemon's node: requests about jobs of other nodes
	// are forwarded to theirs.
	Node string
	// Info and Ingest describe the daemon (ping, stats); Offers is what its
	// launcher offers now (nil: nothing).
	Info   func() api.Info
	Ingest func() api.IngestStats
	Offers func(ctx context.Context) (api.Offers, error)
	// Socket is the unix socket's path; Shared makes it writable by every
	// local user (a root daemon, whose users are told apart by the kernel),
	// else only the daemon's user can connect.
	Socket string
	Shared bool
	// Listen, when set, also serves the API on TCP: with TLS (TLSCert and
	// TLSKey) unless it is a loopback address, and always with the bearer
	// tokens of Tokens (a file of "TOKEN USER" lines).
	Listen          string
	TLSCert, TLSKey string
	Tokens          string
	// Limits bound what the listeners keep open (bounds.go).
	Limits Limits
	// UI, when set, is the web dashboard: served under /ui/ on the TCP
	// listener, and asked for login links by the dashboard verb.
	UI UI
}

// UI is the web dashboard (daemon/dashboard) as the API serves it.
type UI interface {
	// Handler serves the dashboard under /ui/ on the TCP listener: tokens
	// names the user a bearer token of the API's token file stands for;
	// secure says the listener serves TLS.
	Handler(tokens func(token string) (api.Owner, error), secure bool) http.Handler
	// Link is a one-time login link to the dashboard for who.
	Link(ctx context.Context, who api.Owner) (api.DashboardLink, error)
}

// Server serves the API until Close.
type Server struct {
	o      Options
	log    *zap.Logger
	self   api.Owner // the daemon's user
	users  users
	tokens tokens
	owners ownerCache
	bounds bounds

	base       context.Context
	cancelBase context.CancelFunc
	srvs       []*http.Server
	addr       string // the TCP listener's address ("" without one)
	socket     string // the unix socket this server made ("" before it has)
	forwardSub *nats.Subscription
	wg         sync.WaitGroup
	// inproc serves the in-process clients (As), one a user.
	inproc   *pipeListener
	inprocMu sync.Mutex
	clients  map[uint32]*api.Client
}

// Listen opens the API's listeners and serves them until Close or the end
// of ctx (the daemon's root).
func Listen(ctx context.Context, o Options) (_ *Server, err error) {
	s := &Server{o: o, log: o.Log}
	s.bounds.l = o.Limits.withDefaults()
	s.owners.index = o.Index
	if s.self, err = s.users.byID(uint32(os.Geteuid()), uint32(os.Getegid())); err != nil {
		return nil, err
	}
	s.base, s.cancelBase = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			s.Close(ctx)
		}
	}()
	if err := s.serveForwarded(s.verbs()); err != nil {
		return nil, err
	}
	ln, err := unixsock.Listen(o.Socket, "api socket", "choose a shorter --state-dir", o.Shared)
	if err != nil {
		return nil, err
	}
	s.socket = o.Socket
	s.serve(ln, nil, func(ctx context.Context, c net.Conn) context.Context {
		o, err := s.peerOwner(c)
		return context.WithValue(ctx, callerKey{}, caller{owner: o, err: err})
	})
	s.inproc = newPipeListener()
	s.serve(s.inproc, nil, inprocCaller)
	if o.Listen != "" {
		if err := s.listenTCP(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// listenTCP serves the API on Options.Listen, with tokens, and TLS off loopback.
func (s *Server) listenTCP() error {
	o := s.o
	if o.Tokens == "" {
		return fmt.Errorf("api listen %s: needs api_tokens (a file of \"TOKEN USER\" lines): no endpoint answers an anonymous client", o.Listen)
	}
	var err error
	if s.tokens, err = loadTokens(o.Tokens, &s.users); err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if o.TLSCert != "" || o.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return fmt.Errorf("api listen %s: load TLS certificate: %w", o.Listen, err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	} else if !Loopback(o.Listen) {
		return fmt.Errorf("api listen %s: off loopback the API needs TLS: set api_tls_cert and api_tls_key", o.Listen)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("api listen %s: %w", o.Listen, err)
	}
	s.addr = ln.Addr().String()
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	wrap := s.tokenAuth
	if o.UI != nil {
		ui := o.UI.Handler(s.tokens.ownerOf, tlsCfg != nil)
		wrap = func(api http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/ui/", ui)
			mux.Handle("/", s.tokenAuth(api))
			return mux
		}
	}
	s.serve(ln, wrap, nil)
	return nil
}

// Loopback reports whether addr ("host:port") listens on loopback only.
func Loopback(addr string) bool { return netaddr.Loopback(addr) }

// serve serves the API on ln in a goroutine joined by Close; wrap, when
// set, wraps the handler (authentication), and connCtx names the caller.
func (s *Server) serve(ln net.Listener, wrap func(http.Handler) http.Handler, connCtx func(context.Context, net.Conn) context.Context) {
	routes := s.routes()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeWithin(w, 0) // each request's own write deadline, not the last one's
		routes.ServeHTTP(w, r)
	})
	if wrap != nil {
		h = wrap(h)
	}
	ln = s.bound(ln)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: s.bounds.l.IdleTimeout, ConnContext: connCtx,
		BaseContext: func(net.Listener) context.Context { return s.base }, ErrorLog: zap.NewStdLog(s.log)}
	s.srvs = append(s.srvs, srv)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("serve the api", zap.String("addr", ln.Addr().String()), zap.Error(err))
		}
	}()
}

// tokenAuth names a TCP request's caller by its bearer token.
func (s *Server) tokenAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := s.tokens.owner(r.Header.Get("Authorization"))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller{owner: o, err: err})))
	})
}

// Addr is the TCP listener's address ("" when there is none).
func (s *Server) Addr() string { return s.addr }

// Close ends every stream, stops the listeners and waits for them; the
// unix socket is removed (only when this server made it: not another
// daemon's that it found serving).
func (s *Server) Close(ctx context.Context) {
	if s.forwardSub != nil {
		_ = s.forwardSub.Unsubscribe()
	}
	s.cancelBase()
	s.closeClients()
	for _, srv := range s.srvs {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	s.wg.Wait()
	if s.socket != "" {
		_ = os.Remove(s.socket)
	}
}

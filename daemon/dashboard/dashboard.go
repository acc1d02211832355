// Package dashboard is scavd's web dashboard: live pages of a user's jobs
// (state, configuration, speed, time and cost left), of one job (charts of
// its speed, step time, loss and noise scale with its relaunches marked;
// its attempts, each with the decision that started it and its predicted
// against its measured step time; the candidates' time–cost front; its
// bill; its output; stop and move) and of the node (CPUs, memory, GPUs,
// each job's processes). The figures are report's, as `scavctl report` and
// `scavctl top` show them.
//
// It reads and acts through the API (daemon/apiserver) as the user who
// looks: a user sees and acts on only their own jobs, root on all, by the
// API's own rules. Who looks is known by a session cookie, got from a
// one-time login link that `scavctl dashboard` asks for over the API's
// unix socket (bound to the caller's uid, single-use, 60 s), or from an API
// bearer token (the TCP listener's); no page, stream or action answers
// without one, and actions need the session's CSRF token too.
//
// The dashboard is served under /ui/ on the API's TCP listener and on a
// loopback port of its own (Options.Listen), opened at the first login
// link. Pages are html/template (every value escaped), live by server-sent
// events that carry fragments rendered by the same templates and the
// charts' series; the one script library, uPlot, is a pinned built file
// embedded with its licence (static/), so the dashboard needs no network.
//
//	browser --GET /ui/login?t=LINK--> session cookie --> pages, /ui/events/*
//	           |                                            |
//	     scavctl dashboard (unix socket, uid) -> Link    feeds (one per job,
//	                                                     shared) <- API as the owner
package dashboard

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// Source is what the dashboard reads and does through the API, as one
// caller (*api.Client is one).
type Source interface {
	Jobs(ctx context.Context) ([]api.Job, error)
	AllJobs(ctx context.Context) ([]api.Job, error)
	Job(ctx context.Context, id string) (api.Job, error)
	Stop(ctx context.Context, id string, grace time.Duration) (api.Job, error)
	Move(ctx context.Context, id string, cfg plugins.Config, reason string) (api.Job, error)
	Steps(ctx context.Context, job string, follow bool, fn func(telemetry.StepRecord) error) error
	Output(ctx context.Context, job string, follow bool, fn func(*telemetry.LogLine, *telemetry.Event) error) error
	LatestNodeSamples(ctx context.Context, follow bool, fn func(telemetry.NodeSample) error) error
	FollowSteps(job string, fn func(telemetry.StepRecord)) (*api.StepFeed, error)
}

// Options configure a Server.
type Options struct {
	Log *zap.Logger
	// As is the API called as who: what the dashboard shows and does for a
	// user is what the API lets them.
	As func(who api.Owner) Source
	// Self is the daemon's user: the feed of every job's live steps, which
	// the viewers of the jobs page share, reads as them.
	Self func() api.Owner
	// Listen is the address of the login links' listener (port 0: any free
	// one), opened at the first link; empty: no links. Off loopback it
	// needs TLSCert and TLSKey.
	Listen          string
	TLSCert, TLSKey string
	// Node names the daemon's node in the pages' titles.
	Node string
}

// Server is the dashboard. Its handlers serve until Close.
type Server struct {
	o     Options
	log   *zap.Logger
	auth  *sessions
	feeds *feeds
	pages *pages

	base   context.Context
	cancel context.CancelFunc
	// The link listener: opened by the first Link.
	mu      sync.Mutex
	linkSrv *http.Server
	linkURL string
	// streams counts each user's open event streams.
	streams map[uint32]int
	wg      sync.WaitGroup
}

//go:embed static templates
var assets embed.FS

// New returns a dashboard that lives until Close or the end of ctx.
func New(ctx context.Context, o Options) *Server {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Server{o: o, log: o.Log, auth: newSessions(time.Now), pages: mustPages()}
	s.base, s.cancel = context.WithCancel(ctx)
	s.feeds = newFeeds(s.base, o.As, o.Self, o.Log)
	return s
}

// Handler serves the dashboard under /ui/. tokens, when set, lets a bearer
// token of the API's token file stand for its user (on every request, or
// once at the login form for a session); secure marks the session cookie
// for TLS only.
func (s *Server) Handler(tokens func(token string) (api.Owner, error), secure bool) http.Handler {
	return s.handler(tokens, secure, nil)
}

// handler is Handler; hosts, when set, are the only Host headers it
// answers (the link listener's: a page of another site renamed to
// 127.0.0.1 finds nothing).
func (s *Server) handler(tokens func(string) (api.Owner, error), secure bool, hosts map[string]bool) http.Handler {
	a := authn{s: s, tokens: tokens, secure: secure}
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticFiles(static)))
	mux.HandleFunc("GET /ui/login", a.loginPage)
	mux.HandleFunc("POST /ui/login", a.loginToken)
	mux.Handle("POST /ui/logout", a.need(a.csrf(a.logout)))
	mux.Handle("GET /ui/{$}", a.need(s.jobsPage))
	mux.Handle("GET /ui/job/{id}", a.need(s.jobPage))
	mux.Handle("GET /ui/node", a.need(s.nodePage))
	mux.Handle("GET /ui/events/jobs", a.need(s.jobsEvents))
	mux.Handle("GET /ui/events/job/{id}", a.need(s.jobEvents))
	mux.Handle("GET /ui/events/node", a.need(s.nodeEvents))
	mux.Handle("POST /ui/job/{id}/stop", a.need(a.csrf(s.stop)))
	mux.Handle("POST /ui/job/{id}/move", a.need(a.csrf(s.move)))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.pages.error(w, http.StatusNotFound, "No such page: "+r.URL.Path)
	})
	cop := http.NewCrossOriginProtection()
	return secureHeaders(hosts, cop.Handler(mux))
}

// secureHeaders sets the headers every answer carries: scripts and styles
// only from the dashboard itself, no framing, no referrer (a login link
// never leaks), no caching of pages; a request for a host not in hosts
// (when set) is refused.
func secureHeaders(hosts map[string]bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hosts != nil && !hosts[r.Host] {
			http.Error(w, "misdirected request: use the address scavctl dashboard printed", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// staticFiles serves the embedded scripts and styles, cacheable for an hour.
func staticFiles(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// Close stops the link listener, ends every page's stream and feed, and
// waits for them.
func (s *Server) Close(ctx context.Context) {
	s.cancel()
	s.mu.Lock()
	srv := s.linkSrv
	s.mu.Unlock()
	if srv != nil {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		cancel()
	}
	s.wg.Wait()
	s.feeds.wait()
}

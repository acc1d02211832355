package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// pages are the parsed templates: each page is layout.tmpl with its own
// body and fragments (the parts its events replace).
type pages struct {
	sets map[string]*template.Template
}

// mustPages parses the embedded templates (a failure is a bug of the build).
func mustPages() *pages {
	p := &pages{sets: map[string]*template.Template{}}
	for _, name := range []string{"jobs", "job", "node", "message"} {
		p.sets[name] = template.Must(template.New(name).ParseFS(assets, "templates/layout.tmpl", "templates/"+name+".tmpl"))
	}
	return p
}

// pageData is what every page's template gets.
type pageData struct {
	Page, Title, User, CSRF, Node string
	// Events is the URL of the page's event stream ("" for none).
	Events string
	View   any
}

// render writes page name with status code.
func (p *pages) render(w http.ResponseWriter, code int, name string, d pageData) {
	var b bytes.Buffer
	if err := p.sets[name].ExecuteTemplate(&b, "page", d); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// fragment renders the fragment tmpl of page name with v, as HTML text.
func (p *pages) fragment(name, tmpl string, v any) (string, error) {
	var b bytes.Buffer
	if err := p.sets[name].ExecuteTemplate(&b, tmpl, v); err != nil {
		return "", fmt.Errorf("render %s of %s: %w", tmpl, name, err)
	}
	return b.String(), nil
}

// messageView is the message page: a heading, a text, and the login form.
type messageView struct {
	Heading, Text string
	Login, Tokens bool
}

// login writes the login page: how to get a link, and with tokens the
// API token form; text says why it shows.
func (p *pages) login(w http.ResponseWriter, code int, tokens bool, text string) {
	p.render(w, code, "message", pageData{Page: "login", Title: "Log in", View: messageView{Heading: "Log in", Text: text, Login: true, Tokens: tokens}})
}

// error writes an error page.
func (p *pages) error(w http.ResponseWriter, code int, text string) {
	p.render(w, code, "message", pageData{Page: "error", Title: http.StatusText(code), View: messageView{Heading: http.StatusText(code), Text: text}})
}

// data is the page data of page for viewer v.
func (s *Server) data(v viewer, page, title, events string, view any) pageData {
	return pageData{Page: page, Title: title, User: v.owner.User, CSRF: v.csrf, Node: s.o.Node, Events: events, View: view}
}

// apiError writes the page of an error of the API: its status (403 for
// another user's job, 404 for none) and message.
func (s *Server) apiError(w http.ResponseWriter, err error) {
	s.pages.error(w, statusOf(err), err.Error())
}

// statusOf is the HTTP status of an error of the API or the dashboard.
func statusOf(err error) int {
	switch code := api.RefusalStatus(err); {
	case code >= 400:
		return code
	case errors.Is(err, errTooManyFeeds):
		return http.StatusTooManyRequests
	case errors.Is(err, api.ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// states are the jobs page's state filter's choices, as scavctl jobs --state takes them.
var states = []string{"", "active", string(api.StateStarting), string(api.StateRunning), string(api.StateStopping),
	string(api.StateSucceeded), string(api.StateFailed), string(api.StateStopped)}

// jobsPageView is the jobs page: its table and the filter's choices.
type jobsPageView struct {
	Jobs   jobsView
	States []string
}

// listJobs lists the viewer's jobs through the API (root: everyone's).
func listJobs(ctx context.Context, src Source, who api.Owner) ([]api.Job, error) {
	if who.Root() {
		return src.AllJobs(ctx)
	}
	return src.Jobs(ctx)
}

// jobsView is the viewer's jobs table now, filtered by q's state and name.
func (s *Server) jobsView(ctx context.Context, v viewer, f *allFeed, q url.Values) (jobsView, error) {
	jobs, err := listJobs(ctx, s.o.As(v.owner), v.owner)
	if err != nil {
		return jobsView{}, err
	}
	return buildJobsView(jobs, f.frame(jobs, time.Now()), q.Get("state"), q.Get("name")), nil
}

func (s *Server) jobsPage(w http.ResponseWriter, r *http.Request, v viewer) {
	f := s.feeds.allJobs()
	defer s.feeds.releaseAll(f)
	waitReady(r.Context(), f.ready)
	jv, err := s.jobsView(r.Context(), v, f, r.URL.Query())
	if err != nil {
		s.apiError(w, err)
		return
	}
	events := "/ui/events/jobs?" + r.URL.Query().Encode()
	s.pages.render(w, http.StatusOK, "jobs", s.data(v, "jobs", "Jobs", events, jobsPageView{Jobs: jv, States: states}))
}

// waitReady waits until ready closes, ctx ends or replayWait passes.
func waitReady(ctx context.Context, ready <-chan struct{}) {
	t := time.NewTimer(replayWait)
	defer t.Stop()
	select {
	case <-ready:
	case <-ctx.Done():
	case <-t.C:
	}
}

// openJob reads job id as the viewer (the API refuses another user's)
// and returns it with its feed, counted as viewed until the caller
// releases it.
func (s *Server) openJob(ctx context.Context, v viewer, id string) (api.Job, *jobFeed, error) {
	j, err := s.o.As(v.owner).Job(ctx, id)
	if err != nil {
		return j, nil, err
	}
	f, err := s.feeds.job(j)
	return j, f, err
}

func (s *Server) jobPage(w http.ResponseWriter, r *http.Request, v viewer) {
	j, f, err := s.openJob(r.Context(), v, r.PathValue("id"))
	if err != nil {
		s.apiError(w, err)
		return
	}
	defer s.feeds.release(f)
	waitReady(r.Context(), f.replayed)
	s.pages.render(w, http.StatusOK, "job", s.data(v, "job", "Job "+j.ID, "/ui/events/job/"+url.PathEscape(j.ID), s.jobView(j, f)))
}

// jobView is job j's page now, from its feed.
func (s *Server) jobView(j api.Job, f *jobFeed) jobView {
	v, _, _ := f.view(j, time.Now(), nil)
	return v
}

func (s *Server) nodePage(w http.ResponseWriter, r *http.Request, v viewer) {
	nv := s.nodeView(r.Context(), v, 2*time.Second)
	s.pages.render(w, http.StatusOK, "node", s.data(v, "node", "Node", "/ui/events/node", nv))
}

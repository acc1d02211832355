package dashboard

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
)

// viewer is who makes a request of the dashboard: the user, and the CSRF
// token their actions must carry ("" for a bearer token, which a browser
// never sends by itself).
type viewer struct {
	owner   api.Owner
	csrf    string
	session string // the session's secret ("": a bearer token)
}

// handlerFunc is a handler of a request whose viewer is known.
type handlerFunc func(w http.ResponseWriter, r *http.Request, v viewer)

// authn authenticates the dashboard's requests on one listener.
type authn struct {
	s *Server
	// tokens names the user of an API bearer token (nil: none accepted).
	tokens func(string) (api.Owner, error)
	// secure marks the cookie for TLS only.
	secure bool
}

// cookieName is the session cookie's name for the listener r came in on:
// cookies are kept per host, not per port, so two daemons' dashboards on
// 127.0.0.1 must not take each other's.
func cookieName(r *http.Request) string {
	_, port, err := net.SplitHostPort(r.Host)
	if err != nil || port == "" {
		port = "0"
	}
	return "scavd_session_" + port
}

// who is the viewer of r: by its session cookie, or by its bearer token.
func (a authn) who(r *http.Request) (viewer, bool) {
	if c, err := r.Cookie(cookieName(r)); err == nil {
		if sess, ok := a.s.auth.lookup(c.Value); ok {
			return viewer{owner: sess.owner, csrf: sess.csrf, session: c.Value}, true
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && a.tokens != nil {
		if o, err := a.tokens(tok); err == nil {
			return viewer{owner: o}, true
		}
	}
	return viewer{}, false
}

// need serves h to a request with a viewer, and answers one without: a
// page with the login page, anything else with a bare 401.
func (a authn) need(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.s.base.Err() != nil {
			http.Error(w, "the dashboard is stopping with its scavd", http.StatusServiceUnavailable)
			return
		}
		v, ok := a.who(r)
		if !ok {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/ui/events/") {
				a.s.pages.login(w, http.StatusUnauthorized, a.tokens != nil, "")
				return
			}
			http.Error(w, "unauthenticated: log in first (scavctl dashboard)", http.StatusUnauthorized)
			return
		}
		h(w, r, v)
	})
}

// csrf serves h to an action that carries the session's CSRF token (the
// X-CSRF-Token header of the page's script, or the csrf field of its
// form); a bearer token's action needs none.
func (a authn) csrf(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, v viewer) {
		if v.session != "" {
			got := r.Header.Get("X-CSRF-Token")
			if got == "" {
				got = r.PostFormValue("csrf")
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(v.csrf)) != 1 {
				http.Error(w, "forbidden: the request lacks this session's CSRF token; reload the page", http.StatusForbidden)
				return
			}
		}
		h(w, r, v)
	}
}

// loginPage spends a login link (?t=) for a session, or shows the login page.
func (a authn) loginPage(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("t")
	if tok == "" {
		a.s.pages.login(w, http.StatusOK, a.tokens != nil, "")
		return
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		// A page of another site may not log a browser in as whoever
		// minted the link (login CSRF); the link stays good.
		a.s.pages.login(w, http.StatusForbidden, a.tokens != nil, "Open the login link by itself (paste it into the address bar), not from a page of another site.")
		return
	}
	who, ok := a.s.auth.redeem(tok)
	if !ok {
		a.s.log.Info("dashboard login link refused", zap.String("remote", r.RemoteAddr))
		a.s.pages.login(w, http.StatusUnauthorized, a.tokens != nil,
			"This login link is used or expired: a link works once, within a minute. Run scavctl dashboard for a new one.")
		return
	}
	a.startSession(w, r, who)
}

// loginToken logs in with an API bearer token typed into the login form.
func (a authn) loginToken(w http.ResponseWriter, r *http.Request) {
	if a.tokens == nil {
		a.s.pages.login(w, http.StatusForbidden, false, "This address takes no API tokens: run scavctl dashboard for a login link.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	who, err := a.tokens(strings.TrimSpace(r.PostFormValue("token")))
	if err != nil {
		a.s.log.Info("dashboard token login refused", zap.String("remote", r.RemoteAddr))
		a.s.pages.login(w, http.StatusUnauthorized, true, "Unknown token: give a token of the daemon's api_tokens file.")
		return
	}
	a.startSession(w, r, who)
}

// startSession sets a new session's cookie for who and sends them to the jobs.
func (a authn) startSession(w http.ResponseWriter, r *http.Request, who api.Owner) {
	id, _ := a.s.auth.start(who)
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: id, Path: "/ui/", MaxAge: int(SessionTTL.Seconds()),
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode})
	a.s.log.Info("dashboard session", zap.String("user", who.User))
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// logout ends the session (served behind csrf: a page of another site cannot).
func (a authn) logout(w http.ResponseWriter, r *http.Request, v viewer) {
	a.s.auth.end(v.session)
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, Secure: a.secure,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

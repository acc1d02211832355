package daemon

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
)

// dashClient is an HTTP client of the dashboard that follows no redirect
// and sends the cookie it is given.
type dashClient struct {
	t      *testing.T
	hc     *http.Client
	cookie *http.Cookie
	bearer string
}

func newDashClient(t *testing.T) *dashClient {
	return &dashClient{t: t, hc: &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do makes a request and returns the response with its body read (up to
// a first event of a stream).
func (c *dashClient) do(method, u string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "data:") {
				break
			}
		}
		return resp, b.String()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (c *dashClient) get(u string) (int, string) {
	c.t.Helper()
	resp, body := c.do(http.MethodGet, u, nil, nil)
	return resp.StatusCode, body
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf" content="([^"]+)">`)

// TestDashboardNeedsASessionAndKeepsUsersApart: no page, stream or action
// answers without a session or token; a login link works once and gives
// an HttpOnly, SameSite=Strict cookie that expires; an action needs the
// session's CSRF token; another user (nobody, by an API token) gets 403
// on a job's page and stream and does not see it listed; the link
// listener answers only its own host names.
func TestDashboardNeedsASessionAndKeepsUsersApart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: a second user's token needs a root daemon (tokens of root and nobody)")
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	const rootTok, nobodyTok = "root-token-0123456789", "nobody-token-0123456789"
	if err := os.WriteFile(tokens, []byte(rootTok+" root\n"+nobodyTok+" nobody\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, c := startDaemonWith(t, "scavd-dash-", Config{Listen: "127.0.0.1:0", NodeSampleEvery: -1,
		APIListen: "127.0.0.1:0", APITokens: tokens, DashboardListen: "127.0.0.1:0"})
	ctx := context.Background()
	j, err := c.Run(ctx, api.RunRequest{Name: "dash", Command: []string{"sleep", "120"}, Dir: t.TempDir(), Config: plugins.Config{Workers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the job runs", 20*time.Second, func() bool {
		j, err = c.Job(ctx, j.ID)
		return err == nil && j.State == api.StateRunning
	})
	link, err := c.Dashboard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := strings.Cut(link.URL, "/ui/")
	if u, _ := url.Parse(base); u == nil || u.Hostname() != "127.0.0.1" || time.Until(link.Expires) > time.Minute {
		t.Errorf("link %s until %s: want loopback, a minute", link.URL, link.Expires)
	}

	anon := newDashClient(t)
	for _, p := range []string{"/ui/", "/ui/job/" + j.ID, "/ui/node", "/ui/events/jobs", "/ui/events/job/" + j.ID, "/ui/events/node"} {
		if code, _ := anon.get(base + p); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a session: %d, want 401", p, code)
		}
	}
	if resp, _ := anon.do(http.MethodPost, base+"/ui/job/"+j.ID+"/stop", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("stop without a session: %d, want 401", resp.StatusCode)
	}
	if code, _ := anon.get(base + "/ui/login?t=guess"); code != http.StatusUnauthorized {
		t.Errorf("a guessed link: %d", code)
	}

	if resp, _ := anon.do(http.MethodGet, link.URL, nil, map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("the link from another site: %d, want 403", resp.StatusCode)
	}
	resp, _ := anon.do(http.MethodGet, link.URL, nil, nil)
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		cookie = ck
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" || cookie == nil {
		t.Fatalf("the link: %d to %q, cookie %v", resp.StatusCode, resp.Header.Get("Location"), cookie)
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge != 8*3600 || cookie.Path != "/ui/" {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, 8 h, /ui/", cookie)
	}
	if code, _ := anon.get(link.URL); code != http.StatusUnauthorized {
		t.Errorf("the link a second time: %d, want 401", code)
	}

	root := newDashClient(t)
	root.cookie = cookie
	code, page := root.get(base + "/ui/")
	m := csrfMeta.FindStringSubmatch(page)
	if code != http.StatusOK || !strings.Contains(page, j.ID) || m == nil {
		t.Fatalf("jobs page: %d, lists the job %v, csrf %v", code, strings.Contains(page, j.ID), m)
	}
	csrf := m[1]
	if code, page := root.get(base + "/ui/job/" + j.ID); code != http.StatusOK || !strings.Contains(page, `id="job-attempts"`) {
		t.Errorf("job page: %d", code)
	}
	resp, ev := root.do(http.MethodGet, base+"/ui/events/job/"+j.ID, nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(ev, "event: update") || !strings.Contains(ev, "job-attempts") {
		t.Errorf("job events: %d\n%.300s", resp.StatusCode, ev)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if resp, _ := root.do(http.MethodGet, base+"/ui/", nil, map[string]string{"Host": "evil.example:80"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("another host name: %d, want 421", resp.StatusCode)
	}

	stop := base + "/ui/job/" + j.ID + "/stop"
	for what, hdr := range map[string]map[string]string{
		"without its CSRF token": {"Accept": "application/json"},
		"with a wrong token":     {"X-CSRF-Token": "x" + csrf},
		"from another site":      {"X-CSRF-Token": csrf, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
	} {
		if resp, body := root.do(http.MethodPost, stop, nil, hdr); resp.StatusCode != http.StatusForbidden {
			t.Errorf("stop %s: %d, want 403: %s", what, resp.StatusCode, body)
		}
	}
	if j, _ := c.Job(ctx, j.ID); j.State != api.StateRunning {
		t.Fatalf("a refused stop stopped the job: %s", j.State)
	}

	// Over the API's TCP listener, by token: nobody sees no job of root's.
	tcp := "http://" + d.APIAddr()
	nobody := newDashClient(t)
	nobody.bearer = nobodyTok
	for _, p := range []string{"/ui/job/" + j.ID, "/ui/events/job/" + j.ID} {
		if code, body := nobody.get(tcp + p); code != http.StatusForbidden {
			t.Errorf("nobody: GET %s: %d, want 403: %.200s", p, code, body)
		}
	}
	if code, page := nobody.get(tcp + "/ui/"); code != http.StatusOK || strings.Contains(page, j.ID) {
		t.Errorf("nobody's jobs page: %d, lists root's job: %v", code, strings.Contains(page, j.ID))
	}
	if resp, body := nobody.do(http.MethodPost, tcp+"/ui/job/"+j.ID+"/stop", nil, map[string]string{"Accept": "application/json"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("nobody stops root's job: %d, want 403: %s", resp.StatusCode, body)
	}
	if code, _ := newDashClient(t).get(tcp + "/ui/"); code != http.StatusUnauthorized {
		t.Errorf("TCP /ui/ without a token: %d, want 401", code)
	}
	form := strings.NewReader(url.Values{"token": {nobodyTok}}.Encode())
	resp, _ = newDashClient(t).do(http.MethodPost, tcp+"/ui/login", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !strings.HasSuffix(resp.Cookies()[0].Name, d.APIAddr()[strings.LastIndex(d.APIAddr(), ":")+1:]) {
		t.Errorf("token login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	rootTCP := newDashClient(t)
	rootTCP.bearer = rootTok
	if code, _ := rootTCP.get(tcp + "/ui/job/" + j.ID); code != http.StatusOK {
		t.Errorf("root by token: %d", code)
	}

	// The page's stop, with its token: the job stops.
	resp, body := root.do(http.MethodPost, stop, nil, map[string]string{"X-CSRF-Token": csrf, "Accept": "application/json"})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"ok":true`) {
		t.Fatalf("stop: %d %s", resp.StatusCode, body)
	}
	eventually(t, "the job stops", 30*time.Second, func() bool {
		j, err = c.Job(ctx, j.ID)
		return err == nil && j.State.Done()
	})
}

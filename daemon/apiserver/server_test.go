package apiserver

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testdir"
)

// TestUnixSocketCallerIsItsPeer: on the daemon's socket the caller is the
// user of the process at the other end, as the kernel says (SO_PEERCRED).
func TestUnixSocketCallerIsItsPeer(t *testing.T) {
	sock := filepath.Join(testdir.Short(t, "apis"), "api.sock")
	s, err := Listen(context.Background(), Options{Log: zaptest.NewLogger(t), Jobs: (&registry{}).on("n1"), Socket: sock,
		Info: func() api.Info { return api.Info{Node: "n1"} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c, err := api.Dial(t.Context(), sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	j, err := c.Run(t.Context(), api.RunRequest{Name: "mine", Command: []string{"true"}})
	if err != nil || j.Owner == nil || j.Owner.UID != uint32(os.Geteuid()) {
		t.Fatalf("run over the socket: %+v, %v; want a job of uid %d", j, err, os.Geteuid())
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the socket of a daemon of one user: %v, %v; want mode 0600", st.Mode(), err)
	}
}

// TestRequestErrors: unknown verbs and paths, wrong methods, a request
// without an identity and a body over the limit are refused, each with its
// status.
func TestRequestErrors(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		name         string
		who          *api.Owner
		method, path string
		code         int
		want         string
	}{
		{"unknown verb", &alice, http.MethodPost, api.PathCall + "nope", http.StatusNotFound, `bad request: no verb "nope"`},
		{"verb by GET", &alice, http.MethodGet, api.PathCall + api.VerbPing, http.StatusMethodNotAllowed, ""},
		{"stream by POST", &alice, http.MethodPost, api.PathStream, http.StatusMethodNotAllowed, ""},
		{"unknown path", &alice, http.MethodGet, "/v2/ping", http.StatusNotFound, ""},
		{"verb without identity", nil, http.MethodPost, api.PathCall + api.VerbPing, http.StatusUnauthorized, "unauthenticated: no peer credentials"},
		{"stream without identity", nil, http.MethodGet, api.PathStream + "?what=nodes", http.StatusUnauthorized, "unauthenticated: no peer credentials"},
		{"unknown stream", &alice, http.MethodGet, api.PathStream + "?what=nope", http.StatusBadRequest, `bad request: no stream "nope"`},
	} {
		code, rep := f.do(t, tc.who, tc.method, tc.path, []byte("{}"))
		if code != tc.code || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: %d %q; want %d %q", tc.name, code, rep.Error, tc.code, tc.want)
		}
	}
	// A request body is read up to 16 MiB: past it, the request is cut
	// short and does not decode.
	pad := func(n int) []byte { return []byte(`{"job":"alice-1","pad":"` + strings.Repeat("x", n) + `"}`) }
	if code, rep := f.call(t, alice, api.VerbStop, pad(1<<20)); code != http.StatusOK {
		t.Errorf("a stop of 1 MiB: %d %q", code, rep.Error)
	}
	f.jobs.asked()
	if code, rep := f.call(t, alice, api.VerbStop, pad(16<<20)); code != http.StatusBadRequest || !strings.Contains(rep.Error, "decode stop request") {
		t.Errorf("a stop of 16 MiB and more: %d %q", code, rep.Error)
	}
	if got := f.jobs.asked(); len(got) != 0 {
		t.Errorf("the registry was asked %v for a request over the limit", got)
	}
}

// TestTokensNameTheCallerOnTCP: on TCP the caller is the user the bearer
// token stands for; no token or an unknown one is refused.
func TestTokensNameTheCallerOnTCP(t *testing.T) {
	const rootToken, nobodyToken = "root-token-0123456789", "nobody-token-0123456789"
	lines := rootToken + " root\n"
	_, err := user.Lookup("nobody")
	hasNobody := err == nil
	if hasNobody {
		lines += "# a comment\n\n" + nobodyToken + " nobody\n"
	}
	tokens := filepath.Join(testdir.Short(t, "apis"), "tokens")
	if err := os.WriteFile(tokens, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Listen, o.Tokens = "127.0.0.1:0", tokens })
	url := "http://" + f.srv.Addr()
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		name, token string
		code        int
		want        string
	}{
		{"no token", "", http.StatusUnauthorized, "unauthenticated: a TCP client needs a bearer token"},
		{"unknown token", "guess-0123456789abcdef", http.StatusUnauthorized, "unauthenticated: unknown token"},
		{"root's token", rootToken, http.StatusOK, ""},
	} {
		code, rep := request(t, hc, http.MethodPost, url+api.PathCall+api.VerbJobs, tc.token, []byte(`{"all":true}`))
		if code != tc.code || !strings.Contains(rep.Error, tc.want) {
			t.Errorf("%s: %d %q; want %d %q", tc.name, code, rep.Error, tc.code, tc.want)
		}
	}
	if !hasNobody {
		t.Log("no user nobody here: a token of a user who is not root is not tried")
		return
	}
	c, err := api.DialOptions(t.Context(), url, 5*time.Second, api.Options{Token: nobodyToken})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info, err := c.Ping(t.Context()); err != nil || len(info.Active) != 0 {
		t.Errorf("nobody's ping: %+v, %v; want no job", info, err)
	}
	if _, err := c.AllJobs(t.Context()); err == nil || !strings.Contains(err.Error(), "only root lists every user's jobs") {
		t.Errorf("nobody lists every job: %v", err)
	}
}

// TestListenRefuses: what Listen will not serve, each named with its fix.
func TestListenRefuses(t *testing.T) {
	dir := testdir.Short(t, "apis")
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "root-token-0123456789 root\n", 0o600)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"socket path too long", Options{Socket: "/tmp/" + strings.Repeat("s", 110)}, "unix sockets allow 107; choose a shorter --state-dir"},
		{"tcp without tokens", Options{Listen: "127.0.0.1:0"}, "needs api_tokens"},
		{"tcp off loopback without tls", Options{Listen: "0.0.0.0:0", Tokens: good}, "off loopback the API needs TLS: set api_tls_cert and api_tls_key"},
		{"tls key missing", Options{Listen: "0.0.0.0:0", Tokens: good, TLSCert: good}, "load TLS certificate"},
		{"tokens others may read", Options{Listen: "127.0.0.1:0", Tokens: write("open", "root-token-0123456789 root\n", 0o644)}, "lets others read the secrets; chmod 600 it"},
		{"short token", Options{Listen: "127.0.0.1:0", Tokens: write("short", "# tokens\nshort root\n", 0o600)}, `:2: want "TOKEN USER" with a token of 16 characters or more`},
		{"unknown user", Options{Listen: "127.0.0.1:0", Tokens: write("who", "root-token-0123456789 no-such-user-here\n", 0o600)}, `:1: no user "no-such-user-here" on this node`},
		{"no token file", Options{Listen: "127.0.0.1:0", Tokens: filepath.Join(dir, "absent")}, "api tokens: open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Log = zaptest.NewLogger(t)
			if o.Socket == "" {
				o.Socket = filepath.Join(testdir.Short(t, "apis"), "api.sock")
			}
			s, err := Listen(context.Background(), o)
			if err == nil {
				s.Close(context.Background())
				t.Fatal("served")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			if _, err := os.Stat(o.Socket); !os.IsNotExist(err) {
				t.Errorf("the socket of a refused server is left: %v", err)
			}
		})
	}
}

// TestSecondServerLeavesTheFirst: a server on a socket another serves is
// refused, and the first one's socket still answers.
func TestSecondServerLeavesTheFirst(t *testing.T) {
	f := newFixture(t, nil)
	_, err := Listen(context.Background(), Options{Log: zaptest.NewLogger(t), Socket: f.srv.o.Socket})
	if err == nil || !strings.Contains(err.Error(), "another daemon is serving it") {
		t.Fatalf("a second server on the socket: %v", err)
	}
	c, err := net.Dial("unix", f.srv.o.Socket)
	if err != nil {
		t.Fatalf("the first server's socket after the second was refused: %v", err)
	}
	c.Close()
}

// TestSharedSocketIsOpenToEveryUser: a root daemon's socket (Shared) is
// mode 0666: who calls is the kernel's word, not the file's mode. Close
// removes it.
func TestSharedSocketIsOpenToEveryUser(t *testing.T) {
	sock := filepath.Join(testdir.Short(t, "apis"), "api.sock")
	s, err := Listen(context.Background(), Options{Log: zaptest.NewLogger(t), Socket: sock, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("a shared socket: %v, %v; want mode 0666", st.Mode(), err)
	}
	s.Close(context.Background())
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v", err)
	}
}

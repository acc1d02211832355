package apiserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testuser"
)

// The API's bounds (issue 20's third attack, issue 21's slow bodies), tried
// by real unprivileged users on a root daemon's shared socket: the kernel
// names them (SO_PEERCRED), as in production. Each test sets a bound low
// and checks that a user past it is refused, told why and counted, and
// that another user is not affected.

// sharedServer is a root daemon's API on a socket every user can reach,
// with limits l.
func sharedServer(t *testing.T, l Limits) (*fixture, string) {
	t.Helper()
	sock := filepath.Join(testuser.SharedDir(t), "api.sock")
	f := newFixture(t, func(o *Options) { o.Socket, o.Shared, o.Limits = sock, true, l })
	return f, sock
}

// dialAs connects to sock as u.
func dialAs(t *testing.T, u testuser.User, sock string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	u.Do(t, func() { c, err = net.Dial("unix", sock) })
	if err != nil {
		t.Fatalf("%s dials the API: %v", u.Name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// send writes an HTTP request on c and reads its answer's status and
// envelope (a stream's first frame), within 5 s.
func send(t *testing.T, c net.Conn, req string) (int, api.Reply, error) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return 0, api.Reply{}, err
	}
	return readAnswer(c)
}

// readAnswer reads an HTTP answer's status and envelope from c.
func readAnswer(c net.Conn) (int, api.Reply, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, api.Reply{}, err
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return resp.StatusCode, api.Reply{}, err
	}
	var rep api.Reply
	_ = json.Unmarshal(line, &rep)
	return resp.StatusCode, rep, nil
}

const (
	jobsCall     = "POST " + api.PathCall + api.VerbJobs + " HTTP/1.1\r\nHost: scavd\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	followNodes  = "GET " + api.PathStream + "?what=" + api.StreamLive + " HTTP/1.1\r\nHost: scavd\r\n\r\n"
	slowBodyHead = "POST " + api.PathCall + api.VerbJobs + " HTTP/1.1\r\nHost: scavd\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)

// TestConnectionsPerUser: mallory opens more connections than a user may;
// those past the bound are refused with the bound named, counted, and bob
// is served all along.
func TestConnectionsPerUser(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	f, sock := sharedServer(t, Limits{ConnsPerUser: 8})
	held := make([]net.Conn, 8)
	for i := range held {
		held[i] = dialAs(t, mallory, sock)
	}
	for range 12 {
		code, rep, err := send(t, dialAs(t, mallory, sock), jobsCall)
		if err != nil || code != http.StatusTooManyRequests || !strings.Contains(rep.Error, mallory.Name+" has 8 API connections open") ||
			!strings.Contains(rep.Error, "api_limits.conns_per_user") {
			t.Fatalf("mallory's 9th connection: %d %q %v; want it refused, naming the bound", code, rep.Error, err)
		}
	}
	if code, rep, err := send(t, dialAs(t, bob, sock), jobsCall); err != nil || code != http.StatusOK {
		t.Errorf("bob, while mallory holds her connections: %d %q %v", code, rep.Error, err)
	}
	if n := f.srv.Counts().Refused[RefusedConnsPerUser]; n != 12 {
		t.Errorf("refusals counted: %d, want 12", n)
	}
	for _, c := range held { // her connections serve her
		if code, _, err := send(t, c, jobsCall); err != nil || code != http.StatusOK {
			t.Errorf("mallory's own connection: %d %v", code, err)
		}
	}
}

// TestStreamsPerUser: mallory follows more streams than a user may; the
// one past the bound is refused, and bob's stream opens.
func TestStreamsPerUser(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	f, sock := sharedServer(t, Limits{StreamsPerUser: 4})
	for i := range 4 {
		if code, rep, err := send(t, dialAs(t, mallory, sock), followNodes); err != nil || code != http.StatusOK {
			t.Fatalf("mallory's stream %d: %d %q %v", i+1, code, rep.Error, err)
		}
	}
	code, rep, err := send(t, dialAs(t, mallory, sock), followNodes)
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(rep.Error, mallory.Name+" has 4 streams open") || !strings.Contains(rep.Error, "api_limits.streams_per_user") {
		t.Errorf("mallory's 5th stream: %d %q %v; want it refused, naming the bound", code, rep.Error, err)
	}
	if code, rep, err := send(t, dialAs(t, bob, sock), followNodes); err != nil || code != http.StatusOK {
		t.Errorf("bob's stream while mallory holds hers: %d %q %v", code, rep.Error, err)
	}
	if n := f.srv.Counts().Refused[RefusedStreams]; n != 1 {
		t.Errorf("refusals counted: %d, want 1", n)
	}
}

// TestSlowBodyIsCut: a request whose body does not come is answered, and
// its connection ended, within the body timeout.
func TestSlowBodyIsCut(t *testing.T) {
	mallory := testuser.Add(t, "m")
	f, sock := sharedServer(t, Limits{BodyTimeout: 300 * time.Millisecond})
	c := dialAs(t, mallory, sock)
	start := time.Now()
	code, rep, err := send(t, c, slowBodyHead)
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(rep.Error, "did not arrive within 300ms (api_limits.body_timeout)") {
		t.Fatalf("a body that never comes: %d %q %v after %v", code, rep.Error, err, time.Since(start))
	}
	if n := f.srv.Counts().Refused[RefusedBody]; n != 1 {
		t.Errorf("refusals counted: %d, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the connection after the refusal: %v; want it closed", err)
	}
}

// TestIdleConnectionsEnd: a TCP peer (no token) that keeps its connection
// after an answer is cut off after the idle timeout, and one address may
// hold only so many connections.
func TestIdleConnectionsEnd(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("root-token-0123456789 root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) {
		o.Listen, o.Tokens, o.Limits = "127.0.0.1:0", tokens, Limits{IdleTimeout: 300 * time.Millisecond, ConnsPerUser: 4}
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp", f.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial()
	if code, _, err := send(t, c, jobsCall); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("no token: %d %v", code, err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("an idle keep-alive connection after %v: %v; want it closed", time.Since(start), err)
	}
	for range 4 {
		dial()
	}
	time.Sleep(50 * time.Millisecond)
	code, rep, err := send(t, dial(), jobsCall)
	if err != nil || code != http.StatusTooManyRequests || !strings.Contains(rep.Error, "address 127.0.0.1 has 4 API connections open") {
		t.Errorf("a fifth connection from one address: %d %q %v", code, rep.Error, err)
	}
}

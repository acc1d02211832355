package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The daemon serves the API over HTTP: on a unix socket, where the kernel
// says who calls (peer credentials), and optionally on TCP with TLS, where a
// bearer token does. Request/reply verbs are POST PathCall+verb with the
// request as JSON, answered with a Reply; histories and live records are GET
// PathStream, answered with one Frame per line.
const (
	PathCall   = "/v1/call/"
	PathStream = "/v1/stream"
	// SocketName is the API socket's name in a daemon's state directory.
	SocketName = "api.sock"
)

// Stream kinds, the "what" of a PathStream request.
const (
	StreamSteps       = "steps"        // a job's step records (job, follow, after)
	StreamOutput      = "output"       // a job's output lines and events (job, follow, after)
	StreamLastStep    = "last-step"    // a job's newest step message (job)
	StreamLive        = "live"         // step records published from now on (job; empty: every job's)
	StreamNodes       = "nodes"        // node samples (node, kind, follow, after)
	StreamNodesLatest = "nodes-latest" // the newest node sample of each node and kind (follow)
	StreamNodesSince  = "nodes-since"  // node samples since a time (kind, since: Unix nanoseconds)
)

// Frame is one message of a stream: a message of the daemon's history (its
// stream sequence and subject, and its data as published), or the error
// that ended the stream.
type Frame struct {
	Seq     uint64 `json:"seq,omitempty"`
	Subject string `json:"subject,omitempty"`
	Data    string `json:"data,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Options say how to reach a daemon's API over TCP; a unix socket needs none.
type Options struct {
	// Token is the bearer token the daemon's api_tokens file maps to a user
	// (default $SCAV_API_TOKEN).
	Token string
	// CAFile verifies the daemon's TLS certificate (default: the system's roots).
	CAFile string
}

// Client is a connection to a daemon's API. Its methods are the API: the
// request/reply verbs, the jobs' step, output and node histories, and live
// step records.
type Client struct {
	endpoint string // as given
	base     string // the URL requests are made against
	token    string
	hc       *http.Client
}

// Dial connects to the daemon's API at endpoint and checks that it answers
// within timeout. The endpoint is a unix socket's path (or unix://PATH) or an
// https:// (or, on loopback, http://) URL, which needs a token.
func Dial(ctx context.Context, endpoint string, timeout time.Duration) (*Client, error) {
	return DialOptions(ctx, endpoint, timeout, Options{})
}

// DialOptions is Dial with the options of a TCP endpoint.
func DialOptions(ctx context.Context, endpoint string, timeout time.Duration, o Options) (*Client, error) {
	c, err := newClient(endpoint, o)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Ping(pctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, endpoint, err)
	}
	return c, nil
}

// NewClientDial returns a client whose connections dial makes (an
// in-process pipe to a daemon's API, say); the daemon at the other end
// knows who calls by the connection.
func NewClientDial(name string, dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}
	return &Client{endpoint: name, base: "http://scavd", hc: &http.Client{Transport: tr}}
}

func newClient(endpoint string, o Options) (*Client, error) {
	c := &Client{endpoint: endpoint, token: o.Token}
	if c.token == "" {
		c.token = os.Getenv("SCAV_API_TOKEN")
	}
	tr := &http.Transport{MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}
	switch {
	case strings.HasPrefix(endpoint, "https://") || strings.HasPrefix(endpoint, "http://"):
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("api endpoint %q: want https://host:port", endpoint)
		}
		c.base = strings.TrimSuffix(endpoint, "/")
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("read CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate", o.CAFile)
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
	default:
		path := strings.TrimPrefix(endpoint, "unix://")
		if path == "" {
			return nil, errors.New("api endpoint is empty")
		}
		c.base = "http://scavd"
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	c.hc = &http.Client{Transport: tr}
	return c, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// URL is the endpoint the client talks to.
func (c *Client) URL() string { return c.endpoint }

// Connected reports whether the daemon answers now (within a second).
func (c *Client) Connected() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.Ping(ctx)
	return err == nil
}

// request makes one HTTP request of the API.
func (c *Client) request(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.hc.Do(req)
}

// call sends one API request and decodes the answer into out.
func (c *Client) call(ctx context.Context, verb string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, Timeout(verb)+5*time.Second)
		defer cancel()
	}
	resp, err := c.request(ctx, http.MethodPost, PathCall+verb, body)
	if err != nil {
		return fmt.Errorf("%s request: %w", verb, err)
	}
	defer resp.Body.Close()
	var rep Reply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&rep); err != nil {
		return fmt.Errorf("decode %s reply (HTTP %s): %w", verb, resp.Status, err)
	}
	if rep.Error != "" {
		return &Refusal{Status: resp.StatusCode, Msg: rep.Error}
	}
	if out != nil {
		if err := json.Unmarshal(rep.Data, out); err != nil {
			return fmt.Errorf("decode %s reply: %w", verb, err)
		}
	}
	return nil
}

// Refusal is a request the daemon answered with an error (not a lost
// connection): its message, and the HTTP status it came with (403: the
// caller may not; 404: no such job; 0: a stream that failed after it began).
type Refusal struct {
	Status int
	Msg    string
}

func (e *Refusal) Error() string { return e.Msg }

// RefusalStatus is the HTTP status of the refusal err holds (0: none).
func RefusalStatus(err error) int {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Status
	}
	return 0
}

// stream opens a stream and hands fn every frame until the stream ends, fn
// fails or ctx is done; it returns the sequence of the last frame handed.
func (c *Client) stream(ctx context.Context, q url.Values, fn func(Frame) error) (last uint64, err error) {
	resp, err := c.request(ctx, http.MethodGet, PathStream+"?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var rep Reply
		_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep)
		if rep.Error == "" {
			rep.Error = "HTTP " + resp.Status
		}
		return 0, &Refusal{Status: resp.StatusCode, Msg: rep.Error}
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var f Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return last, fmt.Errorf("decode stream frame: %w", err)
		}
		if f.Error != "" {
			return last, &Refusal{Msg: f.Error}
		}
		if err := fn(f); err != nil {
			return last, err
		}
		if f.Seq > last {
			last = f.Seq
		}
	}
	if err := sc.Err(); err != nil {
		return last, err
	}
	if ctx.Err() != nil {
		return last, ctx.Err()
	}
	if q.Get("follow") == "1" {
		return last, io.ErrUnexpectedEOF // a followed stream ends only with ctx
	}
	return last, nil
}

// follow runs stream and, when follow is set and the connection is lost
// (the daemon restarts), opens it again from after the last frame, until ctx
// is done; fn's errors and the daemon's refusals end it.
func (c *Client) follow(ctx context.Context, q url.Values, follow bool, fn func(Frame) error) error {
	if follow {
		q.Set("follow", "1")
	}
	var fnErr error
	guarded := func(f Frame) error {
		if err := fn(f); err != nil {
			fnErr = err
			return err
		}
		return nil
	}
	for {
		last, err := c.stream(ctx, q, guarded)
		var refused *Refusal
		switch {
		case err == nil:
			return nil
		case fnErr != nil:
			return fnErr
		case errors.As(err, &refused), !follow:
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if last > 0 {
			q.Set("after", fmt.Sprint(last))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

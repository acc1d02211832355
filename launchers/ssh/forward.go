package ssh

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	gossh "golang.org/x/crypto/ssh"
)

// forwardSocketName is the name of the forwarded telemetry socket inside
// the attempt's private directory on a host.
const forwardSocketName = "telemetry.sock"

// forwarder carries the telemetry of one host's workers to the daemon: sshd
// listens on a unix socket on the host (OpenSSH streamlocal forwarding) and
// every connection a worker makes there is proxied, both ways, to a new
// connection on the daemon's socket here.
//
// It owns its goroutines: the accept loop and two copies per connection,
// all joined by close.
type forwarder struct {
	client *gossh.Client
	host   string
	dir    string // private directory on the host, removed by close
	path   string // the socket on the host: dir/telemetry.sock
	local  string // the daemon's socket
	ln     net.Listener
	logger *zap.Logger

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  chan struct{} // closed when no connection is open and the listener is closed
	n     int           // open proxied connections
	shut  bool
}

// safeName keeps what is harmless in a file name.
var safeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// startForwarder makes a private directory on the host (mktemp -d, mode
// 0700, so that only the login user can reach the socket in it), asks sshd
// to listen on a socket there and starts accepting.
func startForwarder(c *gossh.Client, host, local, job string, attempt int, logger *zap.Logger) (*forwarder, error) {
	// In the host's $TMPDIR (a cloud instance's own disk), else /tmp.
	tmpl := fmt.Sprintf("scav-%s-a%d-XXXXXXXX", jobTag(job), attempt)
	return listenForwarder(c, host, local, `umask 077 && mktemp -d -p "${TMPDIR:-/tmp}" `+Quote(tmpl), logger)
}

// jobTag is job as a harmless part of a file name.
func jobTag(job string) string {
	tag := safeName.ReplaceAllString(job, "_")
	return tag[:min(len(tag), 24)]
}

// detachedForwarder is the forwarder of a detached attempt: its directory
// is known in advance (attemptDir + "-fwd"), so that a daemon that
// reattaches listens on the socket path its workers were given.
func detachedForwarder(c *gossh.Client, host, local, job string, attempt int, logger *zap.Logger) (*forwarder, error) {
	d := attemptDir(job, attempt) + "-fwd"
	return listenForwarder(c, host, local, `umask 077 && mkdir -p `+d+` && rm -f `+d+"/"+forwardSocketName+` && cd `+d+` && pwd -P`, logger)
}

// listenForwarder makes the forward directory with mkdir (a command that
// prints its path), asks sshd to listen on a socket there and starts accepting.
func listenForwarder(c *gossh.Client, host, local, mkdir string, logger *zap.Logger) (*forwarder, error) {
	out, err := output(c, mkdir)
	if err != nil {
		return nil, fmt.Errorf("forward telemetry: make a directory on %s: %w", host, err)
	}
	dir := strings.TrimSpace(out)
	if !strings.HasPrefix(dir, "/") || !strings.HasPrefix(path.Base(dir), "scav-") || strings.ContainsAny(dir, "\n'") {
		return nil, fmt.Errorf("forward telemetry: mktemp on %s printed %q", host, out)
	}
	f := &forwarder{client: c, host: host, dir: dir, path: dir + "/" + forwardSocketName, local: local,
		logger: logger.With(zap.String("host", host), zap.String("remote_socket", dir+"/"+forwardSocketName)),
		conns:  map[net.Conn]struct{}{}, done: make(chan struct{})}
	ln, err := c.ListenUnix(f.path)
	if err != nil {
		_, _ = output(c, "rm -rf -- "+Quote(dir))
		return nil, fmt.Errorf("forward telemetry: listen on %s:%s (sshd needs AllowStreamLocalForwarding; "+
			"turn forwarding off when a scavd runs there or the hosts share the daemon's socket): %w", host, f.path, err)
	}
	f.ln = ln
	f.wg.Go(f.accept)
	return f, nil
}

func (f *forwarder) accept() {
	for {
		rc, err := f.ln.Accept()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				f.logger.Debug("telemetry forward ended", zap.Error(err))
			}
			return
		}
		lc, err := net.Dial("unix", f.local)
		if err != nil {
			f.logger.Warn("telemetry forward: connect to the daemon socket", zap.String("socket", f.local), zap.Error(err))
			_ = rc.Close()
			continue
		}
		f.mu.Lock()
		if f.shut {
			f.mu.Unlock()
			_ = rc.Close()
			_ = lc.Close()
			continue
		}
		f.conns[rc], f.conns[lc] = struct{}{}, struct{}{}
		f.n++
		f.mu.Unlock()
		f.wg.Go(func() { f.proxy(rc, lc) })
	}
}

// proxy copies both ways; a side that ends closes the other's write half,
// and both connections are closed once both directions have ended.
func (f *forwarder) proxy(rc, lc net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() { copyHalf(lc, rc) })
	wg.Go(func() { copyHalf(rc, lc) })
	wg.Wait()
	_ = rc.Close()
	_ = lc.Close()
	f.mu.Lock()
	delete(f.conns, rc)
	delete(f.conns, lc)
	f.n--
	if f.n == 0 && f.shut {
		close(f.done)
	}
	f.mu.Unlock()
}

// copyHalf copies src to dst, then closes dst's write half (or all of dst
// when it has none), so that the peer sees EOF.
func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// close stops accepting, gives the open connections up to drain to end on
// their own (the last lines of a worker that just exited), closes what is
// left, joins every goroutine and removes the directory on the host (unless
// the host is lost).
func (f *forwarder) close(drain time.Duration, lost bool) {
	_ = f.ln.Close()
	f.mu.Lock()
	f.shut = true
	if f.n == 0 {
		close(f.done)
	}
	f.mu.Unlock()
	select {
	case <-f.done:
	case <-time.After(drain):
		f.mu.Lock()
		f.logger.Debug("closing telemetry connections still open", zap.Int("connections", f.n))
		for c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
	}
	f.wg.Wait()
	if lost {
		return
	}
	if _, err := output(f.client, "rm -rf -- "+Quote(f.dir)); err != nil {
		f.logger.Warn("remove the telemetry socket directory", zap.String("dir", f.dir), zap.Error(err))
	}
}

// output runs cmd in a new session on c, bounded by killTimeout, and
// returns its stdout.
func output(c *gossh.Client, cmd string) (string, error) {
	sess, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	type got struct {
		out []byte
		err error
	}
	ch := make(chan got, 1)
	go func() {
		b, err := sess.Output(cmd)
		ch <- got{b, err}
	}()
	select {
	case g := <-ch:
		return string(g.out), g.err
	case <-time.After(killTimeout):
		_ = sess.Close() // ends Output
		<-ch
		return "", fmt.Errorf("remote %q took over %v", cmd, killTimeout)
	}
}

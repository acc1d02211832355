// Package connlimit bounds the connections a listener keeps open: in all,
// and per key (whose a connection is: the user a unix socket's peer
// credentials name, a TCP peer's address). A connection past a bound is
// refused as it is accepted, so that one user's flood of connections costs
// the server no more than a bounded number of file descriptors, and other
// users' connections are still accepted; the refused peer is told why in a
// message of the server's protocol (best effort: a bounded number of
// refusals at a time read the request's head and answer it, the others are
// closed at once).
package connlimit

import (
	"net"
	"sync"
	"time"
)

// Reasons a connection is refused.
const (
	// ReasonTotal is a connection past the bound on all of them.
	ReasonTotal = "connections"
	// ReasonPerKey is a connection past the bound of its key's.
	ReasonPerKey = "connections_per_user"
)

// Options configure a Listener.
type Options struct {
	// Max bounds the connections open in all; PerKey those of one key
	// (0: no bound).
	Max, PerKey int
	// Key names whose a connection is.
	Key func(net.Conn) string
	// Refused, when set, is told of each refusal (a metric, the log).
	Refused func(key, reason string)
	// Message, when set, is what a refused peer is told: the whole answer
	// of the server's protocol, given the key, the reason, how many are
	// open and the bound.
	Message func(key, reason string, open, limit int) []byte
}

// answering bounds the refusals answered at once, and answerTime how long
// one may take.
const (
	answering  = 64
	answerTime = time.Second
)

// Listener is a net.Listener whose Accept refuses what is past its bounds.
type Listener struct {
	net.Listener
	o Options

	mu      sync.Mutex
	total   int
	per     map[string]int
	answers chan struct{}
	wg      sync.WaitGroup
}

// New bounds ln's connections.
func New(ln net.Listener, o Options) *Listener {
	return &Listener{Listener: ln, o: o, per: map[string]int{}, answers: make(chan struct{}, answering)}
}

// Accept returns the next connection within the bounds; the others are
// refused on the way.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := l.o.Key(c)
		reason, open, limit := l.take(key)
		if reason == "" {
			return &conn{Conn: c, release: func() { l.give(key) }}, nil
		}
		l.refuse(c, key, reason, open, limit)
	}
}

// Open reports how many connections are open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Close closes the listener and waits for the refusals being answered.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.wg.Wait()
	return err
}

// take counts a new connection of key in, or says which bound it passes.
func (l *Listener) take(key string) (reason string, open, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.o.Max > 0 && l.total >= l.o.Max:
		return ReasonTotal, l.total, l.o.Max
	case l.o.PerKey > 0 && l.per[key] >= l.o.PerKey:
		return ReasonPerKey, l.per[key], l.o.PerKey
	}
	l.total++
	l.per[key]++
	return "", 0, 0
}

// give counts a connection of key out.
func (l *Listener) give(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[key]--; l.per[key] <= 0 {
		delete(l.per, key)
	}
}

// refuse tells the peer why, when few refusals are being answered, and
// closes the connection.
func (l *Listener) refuse(c net.Conn, key, reason string, open, limit int) {
	if l.o.Refused != nil {
		l.o.Refused(key, reason)
	}
	if l.o.Message == nil {
		c.Close()
		return
	}
	select {
	case l.answers <- struct{}{}:
	default:
		c.Close()
		return
	}
	msg := l.o.Message(key, reason, open, limit)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() { <-l.answers }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(answerTime))
		// Read the request's head first: closing with it unread would reset
		// the connection before the peer reads the answer.
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = c.Write(msg)
	}()
}

// conn is an accepted connection, counted out once when closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// Unwrap returns the connection accepted (for peer credentials).
func (c *conn) Unwrap() net.Conn { return c.Conn }

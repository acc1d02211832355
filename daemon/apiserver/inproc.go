package apiserver

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/scavenger-ml/scavenger/api"
)

// The daemon's own parts that act for a user (the web dashboard) call the
// API in process, as that user: through a pipe whose server end carries
// the caller, as a unix socket connection carries its peer's credentials.
// They go through the same verbs, streams and ownership checks as scavctl.

// callerConn is the server end of an in-process connection, with the
// caller it stands for.
type callerConn struct {
	net.Conn
	owner api.Owner
}

// pipeListener accepts the in-process connections.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept implements net.Listener.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }

// dial opens an in-process connection for who.
func (l *pipeListener) dial(ctx context.Context, who api.Owner) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- &callerConn{Conn: server, owner: who}:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	return nil, errors.Join(net.ErrClosed, ctx.Err())
}

// As is a client of the API that calls, in process, as who: what it may
// read and do is what who may through scavctl. The server keeps one client
// a user and closes them when it closes.
func (s *Server) As(who api.Owner) *api.Client {
	s.inprocMu.Lock()
	defer s.inprocMu.Unlock()
	if c, ok := s.clients[who.UID]; ok {
		return c
	}
	c := api.NewClientDial("in-process as "+who.User, func(ctx context.Context) (net.Conn, error) { return s.inproc.dial(ctx, who) })
	if s.clients == nil {
		s.clients = map[uint32]*api.Client{}
	}
	s.clients[who.UID] = c
	return c
}

// Self is the daemon's user.
func (s *Server) Self() api.Owner { return s.self }

// closeClients closes the in-process clients' idle connections.
func (s *Server) closeClients() {
	s.inprocMu.Lock()
	defer s.inprocMu.Unlock()
	for _, c := range s.clients {
		c.Close()
	}
}

// inprocCaller names the caller of an in-process connection.
func inprocCaller(ctx context.Context, c net.Conn) context.Context {
	cc, _ := innermost(c).(*callerConn)
	if cc == nil {
		return context.WithValue(ctx, callerKey{}, caller{err: ErrNoIdentity})
	}
	return context.WithValue(ctx, callerKey{}, caller{owner: cc.owner})
}

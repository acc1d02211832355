package ingest

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A connection accepted by net.Listener is in the runtime's netpoller,
// which then wakes for every record its worker writes, although the poller
// reads it from an epoll descriptor of its own: with 64 per-step writers,
// 800 of the runtime's epoll waits a second came back for 640 records, a
// wake of a thread each (issue 25). The telemetry socket's connections are
// therefore accepted raw, and only the poller's epoll watches them.

// sock is one accepted connection's descriptor, outside the runtime's
// netpoller. Any goroutine may use it; only the one that forgets the
// connection closes it (release), so that its number, which the poller's
// epoll knows, is not reused while the poller may still name it.
type sock struct {
	mu sync.RWMutex
	fd int // -1 once released
}

// acceptSock accepts one connection on ln, the listening socket, waiting
// in the runtime's netpoller for the listener alone; the new descriptor is
// non-blocking and close-on-exec.
func acceptSock(ln *os.File) (*sock, error) {
	raw, err := ln.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var aerr error
	if err := raw.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		return !errors.Is(aerr, unix.EAGAIN) // EAGAIN: wait for the next connection
	}); err != nil {
		return nil, err
	}
	if aerr != nil {
		return nil, os.NewSyscallError("accept4", aerr)
	}
	return &sock{fd: nfd}, nil
}

// use runs fn with the descriptor; false when it was released.
func (s *sock) use(fn func(fd int)) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fd < 0 {
		return false
	}
	fn(s.fd)
	return true
}

// write writes line, waiting at most patience for room; it returns how
// many bytes went out.
func (s *sock) write(line []byte, patience time.Duration) (int, error) {
	deadline := time.Now().Add(patience)
	sent := 0
	for sent < len(line) {
		var n, fd int
		var err error
		if !s.use(func(f int) { fd = f; n, err = rawWrite(f, line[sent:]) }) {
			return sent, net.ErrClosed
		}
		sent += max(n, 0)
		switch {
		case err == nil, errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EAGAIN):
			return sent, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return sent, errors.Join(err, errTimeout)
		}
		// Outside use: a release does not wait for this wait. The number
		// may be reused meanwhile, which only ends the wait early or late.
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, int(left.Milliseconds())+1)
	}
	return sent, nil
}

// errTimeout says that a write waited its patience out.
var errTimeout = errors.New("the worker did not read in time")

// shutdown ends both directions: the worker reads EOF, the poller reads
// it too and ends the connection (closing it there).
func (s *sock) shutdown(how int) {
	s.use(func(fd int) { _ = unix.Shutdown(fd, how) })
}

// release closes the descriptor; it is idempotent.
func (s *sock) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		_ = unix.Close(s.fd)
		s.fd = -1
	}
}

// cred is the uid and pid of the process at the other end, from the
// kernel (SO_PEERCRED).
func (s *sock) cred() (uid uint32, pid int32, ok bool) {
	var cred *unix.Ucred
	var err error
	if !s.use(func(fd int) { cred, err = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED) }) || err != nil {
		return 0, 0, false
	}
	return cred.Uid, cred.Pid, true
}

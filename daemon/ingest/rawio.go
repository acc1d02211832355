package ingest

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The poller's reads, its writes of confirmations and its epoll waits never
// wait (the descriptors are non-blocking, the waits have no timeout), so
// they are made as raw system calls: the runtime is not told of them, and
// its monitor does not hand the poller's processor to another thread when
// a loaded machine stretches a call past its 20 µs tick, which cost more
// than the calls themselves (issue 25).

// rawRead reads non-blocking fd once.
func rawRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawWrite writes to non-blocking fd once.
func rawWrite(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// rawEpollPoll takes the ready events of epoll descriptor ep without waiting.
func rawEpollPoll(ep int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

package ingest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/telemetry"
)

// epollTargets maps each epoll descriptor of this process to the
// descriptors it watches (/proc/self/fdinfo's tfd lines).
func epollTargets(t *testing.T) map[int][]int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]int{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
		if err != nil {
			continue // closed since the listing
		}
		out[fd] = []int{}
		for _, line := range strings.Split(string(info), "\n") {
			var target int
			if _, err := fmt.Sscanf(line, "tfd: %d", &target); err == nil {
				out[fd] = append(out[fd], target)
			}
		}
	}
	return out
}

// TestOnlyThePollerWatchesConnections: a worker's connection is watched by
// the poller's epoll alone, and that epoll by nothing: a descriptor in the
// runtime's netpoller woke the runtime for every record (sock.go,
// poller.go).
func TestOnlyThePollerWatchesConnections(t *testing.T) {
	in, key := listenConfirm(t, &fullStore{})
	w := dialConfirm(t, in, key, true)
	w.write(stepLines(1, 1)...)
	if got := w.stored(2, 10*time.Second); got != 2 {
		t.Fatalf("confirmed %d lines, want 2", got)
	}
	conns := map[int]bool{}
	for _, pc := range in.poll.snapshot(nil) {
		conns[pc.fd] = true
	}
	if len(conns) != 1 {
		t.Fatalf("the poller reads %d connections, want 1", len(conns))
	}
	watched := false
	for ep, targets := range epollTargets(t) {
		for _, fd := range targets {
			switch {
			case fd == in.poll.ep:
				t.Errorf("epoll %d watches the poller's epoll %d", ep, fd)
			case conns[fd] && ep == in.poll.ep:
				watched = true
			case conns[fd]:
				t.Errorf("epoll %d, not the poller's (%d), watches connection %d", ep, in.poll.ep, fd)
			}
		}
	}
	if !watched {
		t.Errorf("the poller's epoll %d does not watch the connection %v (read from /proc/self/fdinfo)", in.poll.ep, conns)
	}
}

// TestControlGivesUpOnAWorkerThatDoesNotRead: a control message waits its
// patience for room on a connection whose worker does not read, then is
// skipped, and the daemon goes on confirming another worker's records; what
// the first worker reads later are whole lines.
func TestControlGivesUpOnAWorkerThatDoesNotRead(t *testing.T) {
	in, key := listenConfirm(t, &fullStore{})
	deaf := dialConfirm(t, in, key, false)
	bound(t, in, 1)
	c := telemetry.Control{Kind: telemetry.ControlCheckpoint, ID: "c1", Job: "a-000001", Attempt: 1, Dir: strings.Repeat("d", 4000)}
	sent := 0
	for in.Send(c) == 1 {
		if sent++; sent > 10_000 {
			t.Fatal("10,000 control messages of 4 KB were taken by a worker that does not read")
		}
	}

	other := dialConfirm(t, in, key, true)
	other.write(stepLines(1, 3)...)
	if got := other.stored(4, 10*time.Second); got != 4 {
		t.Fatalf("after a control gave up, another worker had %d of 4 lines confirmed", got)
	}

	_ = deaf.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReaderSize(deaf.c, 1<<16)
	for i := range sent {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("line %d of %d the worker was sent: %v", i+1, sent, err)
		}
		var m telemetry.Control
		if err := json.Unmarshal(line, &m); err != nil || m.ID != "c1" {
			t.Fatalf("line %d of %d the worker was sent: %.80q (%v)", i+1, sent, line, err)
		}
	}
}

// TestCloseRemovesTheSocket: once Close returns, the socket's file is gone
// and nothing is accepted on it (the listener is a copy of the socket's
// descriptor, not a net.Listener that unlinks it).
func TestCloseRemovesTheSocket(t *testing.T) {
	in, _ := listenConfirm(t, &fullStore{})
	in.Close()
	if _, err := os.Stat(in.Path()); !os.IsNotExist(err) {
		t.Errorf("after Close, %s: %v; want it gone", in.Path(), err)
	}
	if c, err := net.Dial("unix", in.Path()); err == nil {
		c.Close()
		t.Error("a connection was accepted after Close")
	}
}

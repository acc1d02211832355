package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
)

// TestSaysWhenItRunsItsOwnDaemon: with no scavd, scavctl runs one inside
// itself, and says so in one line that names the state directory.
func TestSaysWhenItRunsItsOwnDaemon(t *testing.T) {
	state := stateDir(t)
	for _, args := range [][]string{{"jobs"}, {"run", "--", "/bin/true"}} {
		_, errOut, code := scavctl(t, state, args...)
		if code != 0 {
			t.Fatalf("scavctl %v: exit %d\n%s", args, code, errOut)
		}
		var notes []string
		for _, l := range lines(errOut) {
			if strings.Contains(l, "inside this command") {
				notes = append(notes, l)
			}
		}
		if len(notes) != 1 || !strings.Contains(notes[0], "state directory "+state) {
			t.Errorf("scavctl %v said %q; want one line saying it runs a scavd inside itself on state directory %s", args, errOut, state)
		}
	}
}

// TestDaemonSocketThatDoesNotAnswer: a scavd's socket is there but nothing
// answers on it (the daemon died and left it, or it hangs): scavctl says
// so, naming the socket, and runs nothing, unless told --standalone (which
// a hung daemon's state directory, still held, refuses too).
func TestDaemonSocketThatDoesNotAnswer(t *testing.T) {
	for _, hung := range []bool{false, true} {
		name := map[bool]string{false: "dead", true: "hung"}[hung]
		t.Run(name, func(t *testing.T) {
			state := stateDir(t)
			sock := filepath.Join(state, api.SocketName)
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if hung { // accepts, never answers
				defer l.Close()
			} else { // the socket file of a daemon that died
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
			// What the daemon left: its discovery file (not scavctl's own).
			b, _ := json.Marshal(api.Info{PID: 1 << 22, API: sock})
			if err := os.WriteFile(filepath.Join(state, api.DiscoveryFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, errOut, code := scavctl(t, state, "run", "--", "/bin/sh", "-c", "echo ran")
			if code != 1 || !strings.Contains(errOut, sock) || !strings.Contains(errOut, "--standalone") || strings.Contains(errOut, "one runs inside this command") {
				t.Fatalf("run with a %s daemon's socket: exit %d, stderr:\n%s\nwant exit 1 naming %s and --standalone, and no daemon of its own", name, code, errOut, sock)
			}
			out, errOut, code := scavctl(t, state, "--standalone", "run", "--", "/bin/sh", "-c", "echo ran")
			switch {
			case hung && (code != 1 || strings.Contains(out, "ran") || !strings.Contains(errOut, "another daemon is serving it")):
				// A daemon that hangs still holds its state directory.
				t.Fatalf("run --standalone on a hung daemon's state directory: exit %d\n%s%s\nwant that the daemon still serves it", code, out, errOut)
			case !hung && (code != 0 || !strings.Contains(out, "ran") || !strings.Contains(errOut, "state directory "+state)):
				t.Fatalf("run --standalone: exit %d\n%s%s\nwant the job run by a scavd inside scavctl", code, out, errOut)
			}
		})
	}
}

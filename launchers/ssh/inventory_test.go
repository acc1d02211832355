package ssh

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestParseInventory(t *testing.T) {
	in := `# workers
root@10.0.0.1:2222 slots=4
bob@gpu-b  slots=2   # comment
gpu-c
[::1]:2200 slots=1
`
	hosts, err := ParseInventory(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{
		{Addr: "10.0.0.1", Port: 2222, User: "root", Slots: 4},
		{Addr: "gpu-b", User: "bob", Slots: 2},
		{Addr: "gpu-c", Slots: 1},
		{Addr: "::1", Port: 2200, Slots: 1},
	}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("got %+v, want %+v", hosts, want)
	}
	if got := want[0].String(); got != "root@10.0.0.1:2222 slots=4" {
		t.Errorf("String = %q", got)
	}
	_, err = ParseInventory(strings.NewReader("a slots=0\nb:x\nc cores=2\n@d\n"))
	if !errors.Is(err, ErrInventory) {
		t.Fatalf("bad inventory: %v", err)
	}
	for _, s := range []string{"line 1", "line 2", "line 3", "line 4"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not report %s", err, s)
		}
	}
}

func TestParseHosts(t *testing.T) {
	hosts, err := ParseHosts([]string{"u@h1:23,slots=2", "h2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{Addr: "h1", Port: 23, User: "u", Slots: 2}, {Addr: "h2", Slots: 1}}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("got %+v, want %+v", hosts, want)
	}
	if _, err := ParseHosts([]string{"h:99999"}); !errors.Is(err, ErrInventory) {
		t.Errorf("bad port: %v", err)
	}
}

func TestPlace(t *testing.T) {
	hosts := []Host{{Addr: "a", Slots: 2}, {Addr: "b", Slots: 2}, {Addr: "c", Slots: 1}}
	got, err := place(hosts, []int{0, 1, 2}, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []placement{{0, 0, 2}, {0, 1, 2}, {1, 0, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("place 3 = %+v, want %+v", got, want)
	}
	// Host b is lost: it is skipped.
	got, err = place(hosts, []int{0, 2}, 3)
	want = []placement{{0, 0, 2}, {0, 1, 2}, {2, 0, 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("place 3 without b = %+v, %v, want %+v", got, err, want)
	}
	if _, err := place(hosts, []int{0, 1, 2}, 6); err == nil {
		t.Error("place 6 on 5 slots succeeded")
	}
	if _, err := place(hosts, []int{0, 2}, 4); err == nil {
		t.Error("place 4 on the 3 slots of the hosts left succeeded")
	}
}

func TestHostName(t *testing.T) {
	hosts := []Host{{Addr: "a"}, {Addr: "b", Port: 2222}, {Addr: "b", Port: 2223}, {Addr: "c", Port: 22}, {Addr: "c"}}
	var got []string
	for _, h := range hosts {
		got = append(got, hostName(hosts, h))
	}
	want := []string{"a", "b:2222", "b:2223", "c", "c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
}

// TestOrphanKillCommand runs the command through a local sh: it kills the
// group whose leader has the orphan's job and attempt and leaves alone a
// group of another attempt under the same id.
func TestOrphanKillCommand(t *testing.T) {
	startGroup := func(job, attempt string) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.Env = append(os.Environ(), "SCAV_JOB_ID="+job, "SCAV_ATTEMPT="+attempt)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	mine := startGroup("it's a job", "3")
	other := startGroup("it's a job", "2")
	cmd := orphanKillCommand([]orphan{
		{job: "it's a job", attempt: 3, pgid: mine.Process.Pid},
		{job: "it's a job", attempt: 3, pgid: other.Process.Pid},
		{job: "gone", attempt: 1, pgid: 1 << 30},
	})
	if out, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", cmd, err, out)
	}
	if err := mine.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the orphan's group: wait = %v, want killed", err)
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the group of another attempt was signalled: %v", err)
	}
}

// TestRemoteCommandQuoting runs the remote command through a local sh, as
// the login shell would, with arguments that would break naive quoting.
func TestRemoteCommandQuoting(t *testing.T) {
	args := []string{"/bin/sh", "-c", `for a in "$@"; do printf '[%s]' "$a"; done; printf '|%s' "$V"`, "sh",
		"a b", "it's", "$HOME", "`id`", "$(id)", "; id;", `\'"`, "", "'; id; echo '"}
	cmd := remoteCommand(t.TempDir(), []string{"V=x'y $z;`q`"}, args)
	out, err := exec.Command("/bin/sh", "-c", cmd).Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	got := string(out)
	first, rest, _ := strings.Cut(got, "\n")
	if !strings.HasPrefix(first, pgidMarker) {
		t.Errorf("first line %q, want the pgid", first)
	}
	want := "[a b][it's][$HOME][`id`][$(id)][; id;][\\'\"][]['; id; echo ']|x'y $z;`q`"
	if rest != want {
		t.Errorf("got %q, want %q", rest, want)
	}
}

// TestRemoteCommandProgramWithEquals runs a program whose path has a '='
// (env would take it for an assignment and run the next word, or nothing).
func TestRemoteCommandProgramWithEquals(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a=b")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf 'ran %s %s' \"$1\" \"$V\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := remoteCommand("", []string{"V=v"}, []string{prog, "arg1"})
	out, err := exec.Command("/bin/sh", "-c", cmd).Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if _, rest, _ := strings.Cut(string(out), "\n"); rest != "ran arg1 v" {
		t.Errorf("got %q, want %q", rest, "ran arg1 v")
	}
}

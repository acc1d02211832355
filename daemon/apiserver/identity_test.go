package apiserver

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/internal/testuser"
)

// TestUsersAreLookedUpAgain: issue 20's fifth attack. A user removed from
// a group loses it, and a uid given to another name is that name's, within
// the cache's time to live (a minute; 200 ms here), not kept forever.
func TestUsersAreLookedUpAgain(t *testing.T) {
	mallory := testuser.Add(t, "m")
	group := mallory.Name + "g"
	run := func(argv ...string) {
		t.Helper()
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	run("groupadd", group)
	t.Cleanup(func() { _ = exec.Command("groupdel", group).Run() })
	run("usermod", "-aG", group, mallory.Name)
	out, err := exec.Command("getent", "group", group).Output()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSpace(string(out)), ":")
	n, err := strconv.ParseUint(fields[2], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	gid := uint32(n)
	us := &users{ttl: 200 * time.Millisecond}
	uid := uint32(mallory.UID)
	if o, _ := us.byID(uid, 0); !slices.Contains(o.Groups, gid) || o.User != mallory.Name {
		t.Fatalf("mallory: %+v, want in group %d", o, gid)
	}
	run("gpasswd", "-d", mallory.Name, group)
	renamed := "x" + mallory.Name
	run("usermod", "-l", renamed, mallory.Name) // the uid is another name's now
	t.Cleanup(func() { _ = exec.Command("usermod", "-l", mallory.Name, renamed).Run() })
	time.Sleep(300 * time.Millisecond)
	o, _ := us.byID(uid, 0)
	if slices.Contains(o.Groups, gid) {
		t.Errorf("mallory keeps group %d after her removal from it: %+v", gid, o)
	}
	if o.User != renamed {
		t.Errorf("uid %d is %q, want the name it has now, %q", uid, o.User, renamed)
	}
	if o, err := us.byName(renamed); err != nil || o.UID != uid {
		t.Errorf("by name: %+v %v", o, err)
	}
}

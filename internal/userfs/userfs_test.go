package userfs_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/internal/userfs"
)

// idOf is u's identity, with no supplementary group.
func idOf(u testuser.User) *userfs.ID { return &userfs.ID{UID: uint32(u.UID), GID: uint32(u.GID)} }

// TestAsTakesTheUsersRights: what a root process does through As, it does
// with the user's rights and only theirs (not root's groups), on that one
// thread: the rest of the process stays root all along.
func TestAsTakesTheUsersRights(t *testing.T) {
	mallory := testuser.Add(t, "m")
	root := testuser.SharedDir(t)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(root, "secret") // root's, group root, readable by the group
	if err := os.WriteFile(secret, []byte("s"), 0o640); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(root, "private") // root-only directory
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(root, "own")
	if err := os.Mkdir(own, 0o700); err != nil || os.Chown(own, mallory.UID, mallory.GID) != nil {
		t.Fatal("make mallory's directory")
	}

	// The rest of the process reads root's files all along.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rootFailed error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := os.ReadFile(filepath.Join(private, "f")); err != nil {
					rootFailed = err
					return
				}
			}
		}()
	}
	for range 20 {
		err := userfs.As(idOf(mallory), func() error {
			if _, err := os.ReadFile(secret); !errors.Is(err, os.ErrPermission) {
				t.Errorf("mallory read root's group-readable file (err %v)", err)
			}
			if _, err := userfs.OpenDir(private); !errors.Is(err, os.ErrPermission) {
				t.Errorf("mallory opened root's private directory (err %v)", err)
			}
			d, err := userfs.OpenDir(root)
			if err != nil {
				return err
			}
			defer d.Close()
			if err := d.Remove("secret"); !errors.Is(err, os.ErrPermission) {
				t.Errorf("mallory removed root's file (err %v)", err)
			}
			o, err := d.Sub("own")
			if err != nil {
				return err
			}
			defer o.Close()
			if err := os.WriteFile(filepath.Join(own, "mine"), nil, 0o600); err != nil {
				return err
			}
			return o.Remove("mine")
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if rootFailed != nil {
		t.Errorf("the rest of the process lost root's rights while As ran: %v", rootFailed)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("root's file: %v", err)
	}
}

// TestOpenRefusesWhatIsNotARegularFile: a symlink, a FIFO (which would
// block an open for reading) and a sparse file of 1 GiB (no disk, but
// read whole it would fill the memory) are refused without being read or
// waited on; a symlinked directory is not entered.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	mallory := testuser.Add(t, "m")
	dir := filepath.Join(testuser.SharedDir(t), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, mallory.UID, mallory.GID); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(filepath.Dir(dir), "victim") // root's
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	} // with a file the symlinks name
	if err := os.WriteFile(filepath.Join(victim, "a.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mallory.Do(t, func() {
		for _, err := range []error{
			os.Symlink(filepath.Join(victim, "a.jsonl"), filepath.Join(dir, "link.jsonl")),
			os.Symlink(victim, filepath.Join(dir, "linkdir")),
			unix.Mkfifo(filepath.Join(dir, "fifo.jsonl"), 0o600),
			os.WriteFile(filepath.Join(dir, "ok.jsonl"), []byte("{}\n"), 0o600),
		} {
			if err != nil {
				t.Error(err)
			}
		}
		if f, err := os.Create(filepath.Join(dir, "sparse.jsonl")); err != nil || f.Truncate(1<<30) != nil || f.Close() != nil {
			t.Errorf("sparse file: %v", err)
		}
	})
	start := time.Now()
	err := userfs.As(idOf(mallory), func() error {
		d, err := userfs.OpenDir(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		for name, want := range map[string]error{"link.jsonl": userfs.ErrNotRegular, "fifo.jsonl": userfs.ErrNotRegular, "linkdir": userfs.ErrNotRegular, "sparse.jsonl": userfs.ErrTooLarge} {
			if f, err := d.Open(name, 64<<20); !errors.Is(err, want) {
				t.Errorf("open %s: %v, want %v", name, err, want)
				if f != nil {
					f.Close()
				}
			}
		}
		if _, err := d.Sub("linkdir"); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("entered a symlinked directory: %v", err)
		}
		if _, err := userfs.OpenDir(filepath.Join(dir, "linkdir")); err == nil {
			t.Error("OpenDir followed a symlink at its end")
		}
		if _, err := d.Open("../x", 10); !errors.Is(err, userfs.ErrBadName) {
			t.Errorf("open ../x: %v", err)
		}
		f, err := d.Open("ok.jsonl", 3) // it grows past its bound: reading stops there
		if err != nil {
			return err
		}
		defer f.Close()
		a, err := os.OpenFile(filepath.Join(dir, "ok.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, _ = a.WriteString("more\n")
		a.Close()
		b, _ := io.ReadAll(f)
		if f.Size != 3 || len(b) != 3 {
			t.Errorf("read %q of a file of %d bytes, want 3 bytes: the bound", b, f.Size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: something waited", d)
	}
}

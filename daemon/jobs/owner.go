package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/userdb"
	"github.com/scavenger-ml/scavenger/internal/userfs"
	"github.com/scavenger-ml/scavenger/plugins"
)

// A job runs as its owner, the user who submitted it. A daemon runs its own
// user's jobs as itself; a root daemon runs another user's with their uid,
// groups and home, through a launcher that can (Capabilities.RunAs), and
// gives them a checkpoint directory of their own.

// ErrRunAs is a job whose owner the daemon cannot run it as.
var ErrRunAs = errors.New("cannot run the job as its owner")

// runAs is the user the workers of a job of owner run as: nil when that is
// the daemon's own user.
func runAs(owner *api.Owner) *plugins.RunAs {
	if owner == nil || int(owner.UID) == os.Geteuid() {
		return nil
	}
	return &plugins.RunAs{UID: owner.UID, GID: owner.GID, Groups: owner.Groups, Name: owner.User, Home: owner.Home}
}

// checkOwner says whether the registry can run a job of owner: as itself,
// or as root through a launcher that runs workers as other users.
func (g *Registry) checkOwner(ctx context.Context, owner *api.Owner) error {
	if runAs(owner) == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: this scavd runs as uid %d and runs only its own user's jobs, not %s's", ErrRunAs, os.Geteuid(), owner.User)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	caps, err := g.o.Launcher.Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("ask launcher %s what it can run: %w", g.o.Launcher.Name(), err)
	}
	if !caps.RunAs {
		return fmt.Errorf("%w: launcher %s runs workers only as the daemon's user (root), not as %s; run the job through a scavd of your own (scavctl starts one) or a launcher that runs jobs as their owner",
			ErrRunAs, g.o.Launcher.Name(), owner.User)
	}
	return nil
}

// ownerEnv is the plain environment of owner's worker when the
// environment they ran with is not known (a root resume of a job whose
// kept environment is gone): never the caller's.
func ownerEnv(o api.Owner) []string {
	return []string{"HOME=" + o.Home, "USER=" + o.User, "LOGNAME=" + o.User, "PATH=/usr/local/bin:/usr/bin:/bin"}
}

// refreshOwner looks j's owner up again before the job runs anew (a
// resume): their groups and home as they are now. A uid that names another
// user now, or none, is refused: the job is not run as a stranger.
func refreshOwner(j *api.Job) error {
	o := j.Owner
	if runAs(o) == nil {
		return nil
	}
	now, found := userdb.ByID(o.UID, o.GID)
	switch {
	case !found:
		return fmt.Errorf("%w: job %s was %s's (uid %d), and no user has uid %d now", ErrRunAs, j.ID, o.User, o.UID, o.UID)
	case now.User != o.User:
		return fmt.Errorf("%w: job %s was %s's (uid %d), and uid %d is %s's now: it is not run as them", ErrRunAs, j.ID, o.User, o.UID, o.UID, now.User)
	}
	j.Owner = &now
	return nil
}

// fsID is the identity the daemon takes to act on the files of a job of
// owner (its checkpoint directory, spool, manifest): nil when that is the
// daemon's own user.
func fsID(owner *api.Owner) *userfs.ID {
	u := runAs(owner)
	if u == nil {
		return nil
	}
	return &userfs.ID{UID: u.UID, GID: u.GID, Groups: u.Groups}
}

// checkpointDir makes job j's checkpoint directory. The daemon's own jobs
// get it made wherever they say; another user's job gets one under the
// daemon's checkpoint root, owned by them, or names one of its own that
// already exists, is a directory, is theirs and that they can open (a root
// daemon makes nothing where a user could not). The refusal is worded the
// same whatever the reason, so that it tells no more about a path than the
// user could see.
func (g *Registry) checkpointDir(j api.Job, given bool) error {
	u := runAs(j.Owner)
	if u == nil {
		if err := os.MkdirAll(j.CheckpointDir, 0o700); err != nil {
			return fmt.Errorf("%w: create checkpoint directory %s: %w", api.ErrBadRequest, j.CheckpointDir, err)
		}
		return nil
	}
	if given {
		err := userfs.As(fsID(j.Owner), func() error {
			d, err := userfs.OpenDir(j.CheckpointDir)
			if err != nil {
				return err
			}
			defer d.Close()
			if uid, err := d.Owner(); err != nil || uid != u.UID {
				return errors.New("not theirs")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: checkpoint directory %s: not a directory of %s's that %s can open (make it first, as %s)",
				api.ErrBadRequest, j.CheckpointDir, u.Name, u.Name, u.Name)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(j.CheckpointDir), 0o711); err != nil {
		return fmt.Errorf("create checkpoint root: %w", err)
	}
	if err := os.Mkdir(j.CheckpointDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create checkpoint directory %s: %w", j.CheckpointDir, err)
	}
	if err := os.Lchown(j.CheckpointDir, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("give checkpoint directory %s to %s: %w", j.CheckpointDir, u.Name, err)
	}
	return nil
}

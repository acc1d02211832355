package apiserver

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
)

// ErrNoIdentity is a caller the daemon cannot name: no peer credentials, no
// token or an unknown one.
var ErrNoIdentity = errors.New("unauthenticated")

// callerKey keys the caller's identity (or why there is none) in a request's context.
type callerKey struct{}

// caller is who makes a request, as the kernel or a token says.
type caller struct {
	owner api.Owner
	err   error
}

// callerOf returns the identity a request's context carries.
func callerOf(ctx context.Context) (api.Owner, error) {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok {
		return api.Owner{}, fmt.Errorf("%w: no peer credentials", ErrNoIdentity)
	}
	return c.owner, c.err
}

// peerOwner is the user of the process at the other end of a unix socket
// connection, from the kernel (SO_PEERCRED).
func (s *Server) peerOwner(c net.Conn) (api.Owner, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return api.Owner{}, fmt.Errorf("%w: not a unix socket", ErrNoIdentity)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return api.Owner{}, fmt.Errorf("%w: %w", ErrNoIdentity, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return api.Owner{}, fmt.Errorf("%w: read peer credentials: %w", ErrNoIdentity, errors.Join(err, credErr))
	}
	return s.users.byID(cred.Uid, cred.Gid)
}

// users looks users up in the system's user database, once each.
type users struct {
	mu    sync.Mutex
	cache map[uint32]api.Owner
}

// byID is the user with uid (and, when the database has no entry, a user
// named by its number with the primary group gid).
func (us *users) byID(uid, gid uint32) (api.Owner, error) {
	us.mu.Lock()
	defer us.mu.Unlock()
	if o, ok := us.cache[uid]; ok {
		return o, nil
	}
	o := api.Owner{UID: uid, GID: gid, User: strconv.FormatUint(uint64(uid), 10)}
	if u, err := user.LookupId(o.User); err == nil {
		o = ownerOf(u, gid)
	}
	if us.cache == nil {
		us.cache = map[uint32]api.Owner{}
	}
	us.cache[uid] = o
	return o, nil
}

// byName is the user called name (or with that number).
func (us *users) byName(name string) (api.Owner, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return api.Owner{}, fmt.Errorf("no user %q on this node", name)
		}
	}
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return ownerOf(u, uint32(gid)), nil
}

// ownerOf turns a user database entry into an owner with its groups.
func ownerOf(u *user.User, gid uint32) api.Owner {
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
		gid = uint32(g)
	}
	o := api.Owner{UID: uint32(uid), GID: gid, User: u.Username, Home: u.HomeDir}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				o.Groups = append(o.Groups, uint32(g))
			}
		}
	}
	return o
}

// tokens maps the sha256 of each bearer token of the API's token file to
// the user it stands for; hashing first keeps the lookup's time independent
// of how much of a guess is right.
type tokens map[[32]byte]api.Owner

// loadTokens reads a token file: one "TOKEN USER" a line ('#' comments),
// mode 0600 or stricter, since the tokens are secrets.
func loadTokens(path string, us *users) (tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api tokens: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("api tokens %s: mode %s lets others read the secrets; chmod 600 it", path, st.Mode().Perm())
	}
	out := tokens{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || len(fields[0]) < 16 {
			return nil, fmt.Errorf("api tokens %s:%d: want \"TOKEN USER\" with a token of 16 characters or more", path, n)
		}
		o, err := us.byName(fields[1])
		if err != nil {
			return nil, fmt.Errorf("api tokens %s:%d: %w", path, n, err)
		}
		out[sha256.Sum256([]byte(fields[0]))] = o
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("api tokens %s: %w", path, err)
	}
	return out, nil
}

// owner is the user a request's bearer token stands for.
func (t tokens) owner(authorization string) (api.Owner, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || tok == "" {
		return api.Owner{}, fmt.Errorf("%w: a TCP client needs a bearer token (scavctl --token-file or $SCAV_API_TOKEN)", ErrNoIdentity)
	}
	return t.ownerOf(tok)
}

// ownerOf is the user token stands for.
func (t tokens) ownerOf(token string) (api.Owner, error) {
	o, ok := t[sha256.Sum256([]byte(token))]
	if !ok || token == "" {
		return api.Owner{}, fmt.Errorf("%w: unknown token", ErrNoIdentity)
	}
	return o, nil
}

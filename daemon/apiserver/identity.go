package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/secret"
	"github.com/scavenger-ml/scavenger/internal/userdb"
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
	cred, err := peerCred(c)
	if err != nil {
		return api.Owner{}, err
	}
	return s.users.byID(cred.Uid, cred.Gid)
}

// peerCred reads the credentials of the process at the other end of a unix
// socket connection (SO_PEERCRED), through the wrappers of the listeners.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := innermost(c).(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("%w: not a unix socket", ErrNoIdentity)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoIdentity, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return nil, fmt.Errorf("%w: read peer credentials: %w", ErrNoIdentity, errors.Join(err, credErr))
	}
	return cred, nil
}

// userTTL is how long a user's entry (name, groups, home) is trusted
// before it is looked up again: a user removed from a group, or a uid given
// to a new user, is seen within it.
const userTTL = time.Minute

// users looks users up in the system's user database, keeping each answer
// for at most ttl (default userTTL), by uid and by name.
type users struct {
	ttl    time.Duration
	mu     sync.Mutex
	byUID  map[uint32]cachedOwner
	byUser map[string]cachedOwner
}

// cachedOwner is a user database answer and when it was looked up.
type cachedOwner struct {
	o  api.Owner
	at time.Time
}

// cached returns what c holds for key when it is fresh.
func cached[K comparable](us *users, c map[K]cachedOwner, key K) (api.Owner, bool) {
	ttl := us.ttl
	if ttl == 0 {
		ttl = userTTL
	}
	e, ok := c[key]
	return e.o, ok && time.Since(e.at) < ttl
}

// keep remembers o, looked up now, under its uid and its name.
func (us *users) keep(o api.Owner) {
	if us.byUID == nil {
		us.byUID, us.byUser = map[uint32]cachedOwner{}, map[string]cachedOwner{}
	}
	e := cachedOwner{o: o, at: time.Now()}
	us.byUID[o.UID] = e
	us.byUser[o.User] = e
}

// byID is the user with uid (and, when the database has no entry, a user
// named by its number with the primary group gid).
func (us *users) byID(uid, gid uint32) (api.Owner, error) {
	us.mu.Lock()
	defer us.mu.Unlock()
	if o, ok := cached(us, us.byUID, uid); ok {
		return o, nil
	}
	o, _ := userdb.ByID(uid, gid)
	us.keep(o)
	return o, nil
}

// byName is the user called name (or with that number).
func (us *users) byName(name string) (api.Owner, error) {
	us.mu.Lock()
	defer us.mu.Unlock()
	if o, ok := cached(us, us.byUser, name); ok {
		return o, nil
	}
	o, err := userdb.ByName(name)
	if err != nil {
		return api.Owner{}, err
	}
	us.keep(o)
	us.byUser[name] = us.byUser[o.User]
	return o, nil
}

// tokens maps the sha256 of each bearer token of the API's token file to
// the name of the user it stands for, looked up (users) at each request;
// hashing first keeps the lookup's time independent of how much of a guess
// is right.
type tokens struct {
	names map[[32]byte]string
	users *users
}

// loadTokens reads a token file: one "TOKEN USER" a line ('#' comments),
// mode 0600 or stricter, since the tokens are secrets.
func loadTokens(path string, us *users) (tokens, error) {
	b, err := secret.Read(path, "api tokens", "read the secrets", nil)
	if err != nil {
		return tokens{}, err
	}
	out := tokens{names: map[[32]byte]string{}, users: us}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 || len(fields[0]) < 16 {
			return tokens{}, fmt.Errorf("api tokens %s:%d: want \"TOKEN USER\" with a token of 16 characters or more", path, n)
		}
		if _, err := us.byName(fields[1]); err != nil {
			return tokens{}, fmt.Errorf("api tokens %s:%d: %w", path, n, err)
		}
		out.names[sha256.Sum256([]byte(fields[0]))] = fields[1]
	}
	if err := sc.Err(); err != nil {
		return tokens{}, fmt.Errorf("api tokens %s: %w", path, err)
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
	name, ok := t.names[sha256.Sum256([]byte(token))]
	if !ok || token == "" {
		return api.Owner{}, fmt.Errorf("%w: unknown token", ErrNoIdentity)
	}
	o, err := t.users.byName(name)
	if err != nil {
		return api.Owner{}, fmt.Errorf("%w: the token's user: %w", ErrNoIdentity, err)
	}
	return o, nil
}

// innermost is the connection under the listeners' wrappers (bounds.go).
func innermost(c net.Conn) net.Conn {
	for {
		w, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			return c
		}
		c = w.Unwrap()
	}
}

package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

// Bounds of the login links and sessions.
const (
	// LinkTTL is how long a login link works (once).
	LinkTTL = 60 * time.Second
	// SessionTTL is how long a session lasts; its cookie expires with it.
	SessionTTL = 8 * time.Hour
	// maxLinksPerUser bounds a user's unused links; maxSessionsPerUser
	// their sessions (the oldest ends first); maxSessions everyone's.
	maxLinksPerUser    = 8
	maxSessionsPerUser = 16
	maxSessions        = 4096
)

// session is a logged-in browser: whose it is, until when, and the token
// its forms and scripts send with every action (CSRF).
type session struct {
	owner   api.Owner
	created time.Time
	expires time.Time
	csrf    string
}

// link is a login link not used yet.
type link struct {
	owner   api.Owner
	expires time.Time
}

// sessions holds the login links and sessions, in memory, keyed by the
// sha256 of their secrets (a lookup takes the same time however much of a
// guess is right). They end with the daemon.
type sessions struct {
	now   func() time.Time
	mu    sync.Mutex
	links map[[32]byte]link
	byID  map[[32]byte]*session
}

func newSessions(now func() time.Time) *sessions {
	return &sessions{now: now, links: map[[32]byte]link{}, byID: map[[32]byte]*session{}}
}

// secret is 32 random bytes, URL-safe.
func secret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// newLink makes a login link's secret for who, working once until it expires.
func (s *sessions) newLink(who api.Owner) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	n := 0
	for _, l := range s.links {
		if l.owner.UID == who.UID {
			n++
		}
	}
	if n >= maxLinksPerUser {
		return "", time.Time{}, fmt.Errorf("%w: %d dashboard login links of %s are unused: use one, or wait %s until they expire",
			api.ErrBadRequest, n, who.User, LinkTTL)
	}
	tok := secret()
	exp := now.Add(LinkTTL)
	s.links[sha256.Sum256([]byte(tok))] = link{owner: who, expires: exp}
	return tok, exp, nil
}

// redeem spends a link: the user it was made for, once, before it expires.
func (s *sessions) redeem(tok string) (api.Owner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sha256.Sum256([]byte(tok))
	l, ok := s.links[k]
	delete(s.links, k)
	if !ok || tok == "" || !s.now().Before(l.expires) {
		return api.Owner{}, false
	}
	return l.owner, true
}

// start begins a session for who and returns its secret (the cookie's
// value); past the bounds the oldest session of who, or of anyone, ends.
func (s *sessions) start(who api.Owner) (string, *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	var mine [][32]byte
	for k, v := range s.byID {
		if v.owner.UID == who.UID {
			mine = append(mine, k)
		}
	}
	if len(mine) >= maxSessionsPerUser {
		s.endOldest(mine)
	}
	if len(s.byID) >= maxSessions {
		var all [][32]byte
		for k := range s.byID {
			all = append(all, k)
		}
		s.endOldest(all)
	}
	id := secret()
	sess := &session{owner: who, created: now, expires: now.Add(SessionTTL), csrf: secret()}
	s.byID[sha256.Sum256([]byte(id))] = sess
	return id, sess
}

// endOldest ends the oldest of the sessions keyed by keys.
func (s *sessions) endOldest(keys [][32]byte) {
	var oldest [32]byte
	var at time.Time
	for i, k := range keys {
		if c := s.byID[k].created; i == 0 || c.Before(at) {
			oldest, at = k, c
		}
	}
	delete(s.byID, oldest)
}

// lookup is the live session of secret id.
func (s *sessions) lookup(id string) (*session, bool) {
	if id == "" {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sha256.Sum256([]byte(id))
	sess, ok := s.byID[k]
	if ok && !s.now().Before(sess.expires) {
		delete(s.byID, k)
		return nil, false
	}
	return sess, ok
}

// end ends the session of secret id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// sweep forgets the expired links and sessions.
func (s *sessions) sweep(now time.Time) {
	for k, l := range s.links {
		if !now.Before(l.expires) {
			delete(s.links, k)
		}
	}
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
}

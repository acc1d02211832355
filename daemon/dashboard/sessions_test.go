package dashboard

import (
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
)

var (
	alice = api.Owner{UID: 1001, User: "alice"}
	bob   = api.Owner{UID: 1002, User: "bob"}
)

// fakeClock is a settable clock for the sessions.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestLinkWorksOnceWithinAMinuteForItsUser(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newSessions(c.now)
	tok, exp, err := s.newLink(alice)
	if err != nil || !exp.Equal(c.t.Add(LinkTTL)) {
		t.Fatalf("newLink: %v, expires %v", err, exp)
	}
	if _, ok := s.redeem(tok + "x"); ok {
		t.Error("a wrong secret logged in")
	}
	who, ok := s.redeem(tok)
	if !ok || who.UID != alice.UID {
		t.Fatalf("redeem: %v %v, want alice", who, ok)
	}
	if _, ok := s.redeem(tok); ok {
		t.Error("a link worked twice")
	}
	late, _, _ := s.newLink(bob)
	c.t = c.t.Add(LinkTTL)
	if _, ok := s.redeem(late); ok {
		t.Error("a link worked at its expiry")
	}
	if _, ok := s.redeem(""); ok {
		t.Error("an empty secret logged in")
	}
}

func TestLinksAndSessionsAreBoundedPerUser(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	s := newSessions(c.now)
	for i := 0; i < maxLinksPerUser; i++ {
		if _, _, err := s.newLink(alice); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	if _, _, err := s.newLink(alice); err == nil {
		t.Error("more unused links than the bound")
	}
	if _, _, err := s.newLink(bob); err != nil {
		t.Errorf("alice's links hold bob's back: %v", err)
	}
	c.t = c.t.Add(LinkTTL)
	if _, _, err := s.newLink(alice); err != nil {
		t.Errorf("expired links still count: %v", err)
	}

	first, _ := s.start(alice)
	for i := 1; i < maxSessionsPerUser; i++ {
		c.t = c.t.Add(time.Second)
		s.start(alice)
	}
	if _, ok := s.lookup(first); !ok {
		t.Fatal("a session ended before the bound")
	}
	c.t = c.t.Add(time.Second)
	last, sess := s.start(alice)
	if _, ok := s.lookup(first); ok {
		t.Error("past the bound the oldest session lives on")
	}
	if got, ok := s.lookup(last); !ok || got != sess || got.csrf == "" || got.owner.UID != alice.UID {
		t.Errorf("lookup of the newest: %+v %v", got, ok)
	}
	c.t = sess.expires
	if _, ok := s.lookup(last); ok {
		t.Error("a session outlived its expiry")
	}
	s.end(last)
	if _, ok := s.lookup(""); ok {
		t.Error("an empty cookie is a session")
	}
}

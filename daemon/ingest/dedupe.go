package ingest

import (
	"slices"
	"sync"
	"time"
)

// A worker's client keeps every record it wrote until the daemon confirms
// it stored it, and sends the unconfirmed ones again on its next
// connection. When the daemon only stalled (a frozen scavd, a write that
// timed out) it may still read the first copies off the old connection:
// without care both would be stored. A client names itself in its hello
// (its session); each (job, attempt, rank, session) then has a mark: the
// steps it sent lately, and a record whose step the mark holds is a copy
// and is dropped (and confirmed: its first copy is on its way to the
// store). The mark covers the markSteps steps below the newest; a record
// older than that is taken (it may be a copy, but no record is lost for
// it). A record the store refused is taken off its mark, so that its next
// copy is taken. Marks live in memory (JetStream's duplicate window covers
// the daemon's own retries of a message, by the message's id,
// StreamPublisher). A daemon that restarts has none: the records its
// predecessor stored but died before confirming would be stored again. So
// the first hello of an attempt that ran before this daemon started seeds
// the attempt's marks from the store (Options.Stored: the steps of its
// last stored records, by rank), and each new mark of its ranks starts
// from its rank's seed.

// markSteps is the steps a mark covers below the newest it saw.
const markSteps = 1 << 13

// maxMarks bounds the marks kept (a KiB each); past it, records of new
// sessions are taken without a mark. Marks unused for markIdle are
// forgotten.
const (
	maxMarks = 1 << 14
	markIdle = 10 * time.Minute
)

// markKey names one client's records of one rank of an attempt.
type markKey struct {
	job           string
	attempt, rank int
	session       string
}

// mark is the steps of one markKey seen lately: the newest, and a ring of
// bits for the markSteps steps below it.
type mark struct {
	newest int64
	bits   [markSteps / 64]uint64
	used   time.Time
}

// has, set and clear work on the bit of step, which the ring covers.
func (m *mark) has(step int64) bool { return m.bits[bit(step)/64]&(1<<(bit(step)%64)) != 0 }
func (m *mark) set(step int64)      { m.bits[bit(step)/64] |= 1 << (bit(step) % 64) }
func (m *mark) clear(step int64)    { m.bits[bit(step)/64] &^= 1 << (bit(step) % 64) }

func bit(step int64) uint64 { return uint64(step) % markSteps }

// covers says whether step lies in the ring (newest-markSteps, newest].
func (m *mark) covers(step int64) bool { return step <= m.newest && step > m.newest-markSteps }

// marks holds the marks of the sessions writing to the socket, and the
// seeds of the attempts that ran before the daemon started.
type marks struct {
	mu     sync.Mutex
	m      map[markKey]*mark
	seeds  map[rankKey]*mark
	seeded map[attemptKey]time.Time // when their seeds were read
	swept  time.Time
}

// attemptKey names an attempt of a job; rankKey one of its ranks (a
// markKey without the session).
type (
	attemptKey struct {
		job     string
		attempt int
	}
	rankKey struct {
		attemptKey
		rank int
	}
)

// toSeed says whether job's attempt is still to be seeded, and notes that it
// is being seeded: true once per attempt (until sweep forgets it).
func (ms *marks) toSeed(job string, attempt int, now time.Time) bool {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	k := attemptKey{job: job, attempt: attempt}
	if _, ok := ms.seeded[k]; ok {
		return false
	}
	if ms.seeded == nil {
		ms.seeded = map[attemptKey]time.Time{}
	}
	ms.sweep(now)
	ms.seeded[k] = now
	return true
}

// seed makes the seeds of job's attempt from its stored steps by rank: a
// rank's seed is a mark of those steps (the newest markSteps of them).
func (ms *marks) seed(job string, attempt int, stored map[int][]int64, now time.Time) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for rank, steps := range stored {
		if len(steps) == 0 || len(ms.seeds) >= maxMarks {
			continue
		}
		m := &mark{newest: slices.Max(steps), used: now}
		for _, s := range steps {
			if m.covers(s) {
				m.set(s)
			}
		}
		if ms.seeds == nil {
			ms.seeds = map[rankKey]*mark{}
		}
		ms.seeds[rankKey{attemptKey{job: job, attempt: attempt}, rank}] = m
	}
}

// markRef is one record taken under a mark, to take it off again should
// the store refuse it.
type markRef struct {
	m    *mark
	step int64
}

// take says whether the record of k at step is new (and marks it), or a
// copy of one seen lately; ref is set for a record marked.
func (ms *marks) take(k markKey, step int64, now time.Time) (ref markRef, isNew bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.m[k]
	if m == nil {
		if ms.m == nil {
			ms.m = map[markKey]*mark{}
		}
		ms.sweep(now)
		if len(ms.m) >= maxMarks {
			return markRef{}, true
		}
		if seed := ms.seeds[rankKey{attemptKey{job: k.job, attempt: k.attempt}, k.rank}]; seed != nil {
			c := *seed // what the previous daemon stored of this rank
			m = &c
		} else {
			m = &mark{newest: step - markSteps} // nothing seen: every step below is uncovered
		}
		ms.m[k] = m
	}
	m.used = now
	switch {
	case step > m.newest:
		if step-m.newest >= markSteps {
			m.bits = [markSteps / 64]uint64{}
		} else {
			for s := m.newest + 1; s < step; s++ {
				m.clear(s)
			}
		}
		m.newest = step
	case !m.covers(step):
		return markRef{}, true // too old to tell: taken
	case m.has(step):
		return markRef{}, false
	}
	m.set(step)
	return markRef{m: m, step: step}, true
}

// untake takes refused records off their marks, so that their next copies
// are taken.
func (ms *marks) untake(refs []markRef) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, r := range refs {
		if r.m != nil && r.m.covers(r.step) {
			r.m.clear(r.step)
		}
	}
}

// sweep forgets the marks and seeds unused for markIdle, at most once a
// minute; ms.mu must be held.
func (ms *marks) sweep(now time.Time) {
	if now.Sub(ms.swept) < time.Minute {
		return
	}
	ms.swept = now
	for k, m := range ms.m {
		if now.Sub(m.used) > markIdle {
			delete(ms.m, k)
		}
	}
	for k, m := range ms.seeds {
		if now.Sub(m.used) > markIdle {
			delete(ms.seeds, k)
		}
	}
	for k, at := range ms.seeded {
		if now.Sub(at) > markIdle {
			delete(ms.seeded, k)
		}
	}
}

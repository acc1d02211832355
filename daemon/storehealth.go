package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/storecheck"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// A damaged store degrades; it does not wedge. Before the embedded server
// opens the store, every record of every stream is read and its hash
// checked (daemon/storecheck): a damaged block is rewritten without its
// damaged stretches, a stream whose metadata cannot be read is moved aside,
// and what was taken out is kept in <state>/damaged-<time>. Once the store
// is open, job records the bucket lost, or holds older than its journal,
// are restored from the journal (telemetry/history), and what could not be
// read is counted: records lost per stream, job records unreadable, step
// records of jobs left without a record. The counts are logged, shown by
// `scavctl status` (api.Info.Store) and exported as metrics; `scavd
// --check-store` reports the same without starting.

// jobStream is the job bucket's stream.
const jobStream = "KV_" + telemetry.JobBucket

// storeTimeout bounds each look the daemon takes at its store at start.
const storeTimeout = time.Minute

// storeHealth is what the daemon found of its store at start.
type storeHealth struct {
	mu sync.Mutex
	// check is the block check; restored what the journal put back.
	check    storecheck.Report
	restored history.Restored
	// unreadable names the job records that cannot be read (read at each look).
	unreadable func() []string
	// orphanRecords counts step records of orphanJobs jobs that have no
	// record (counted when the store was damaged).
	orphanRecords, orphanJobs int
	// missing names the streams a store that had been used lacked (their
	// directories deleted): made afresh, their history gone.
	missing []string
}

// keptStreams are the streams whose absence from a store that holds the
// others is a loss: the journal is not among them (a store made before
// it had none; the job bucket it copies is there).
var keptStreams = []string{telemetry.StepStream, telemetry.OutputStream, telemetry.NodeStream, jobStream}

// missingStreams names the kept streams a store lacks that holds any of them.
func missingStreams(rep storecheck.Report) []string {
	var have, missing []string
	for _, name := range keptStreams {
		if slices.ContainsFunc(rep.Streams, func(s storecheck.Stream) bool { return s.Name == name }) {
			have = append(have, name)
		} else {
			missing = append(missing, name)
		}
	}
	if len(have) == 0 {
		return nil // a new store
	}
	return missing
}

// checkStore checks (and with repair repairs) the store of stateDir,
// keeping what it takes out in <stateDir>/damaged-<now>.
func checkStore(stateDir string, repair bool, now time.Time) (storecheck.Report, error) {
	return storecheck.Check(filepath.Join(stateDir, "jetstream"), storecheck.Options{
		Repair: repair, Aside: filepath.Join(stateDir, "damaged-"+now.UTC().Format("20060102T150405Z")),
		Newest: []string{jobStream, telemetry.JournalStream},
	})
}

// behindJournal names the jobs whose newest record in the journal is later
// than the bucket's (or that the bucket lacks), as the blocks tell.
func behindJournal(rep storecheck.Report) []string {
	bucket, journal := rep.Stream(jobStream).Newest, rep.Stream(telemetry.JournalStream).Newest
	var out []string
	for subj, j := range journal {
		id := telemetry.JobOfSubject(subj)
		h, err := nats.DecodeHeadersMsg(j.Header)
		if id == "" || err != nil {
			continue
		}
		rev, _ := strconv.ParseUint(h.Get("Scav-Revision"), 10, 64)
		if b, ok := bucket["$KV."+telemetry.JobBucket+"."+id]; !ok || b.Seq < rev {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// CheckStore checks the store of stateDir without changing it or starting
// anything (scavd --check-store): what is damaged, how many records are
// lost, which job records the journal would restore. ok is false when
// something is damaged or behind.
func CheckStore(stateDir string) (lines []string, ok bool, err error) {
	rep, err := checkStore(stateDir, false, time.Now())
	if err != nil {
		return nil, false, err
	}
	lines = rep.Lines()
	for _, m := range missingStreams(rep) {
		lines = append(lines, fmt.Sprintf("stream %s is not in the store (its files deleted?): its history is gone; scavd makes it afresh", m))
	}
	behind := behindJournal(rep)
	if len(behind) > 0 {
		lines = append(lines, fmt.Sprintf("job records missing from the job store or older than their journal copy (scavd restores them when it starts): %d: %s",
			len(behind), strings.Join(behind, " ")))
	}
	records := 0
	for _, s := range rep.Streams {
		records += s.Records
	}
	ok = len(lines) == 0
	if ok {
		lines = []string{fmt.Sprintf("store %s: %d streams, %d records, no damage (read in %s)", rep.Store, len(rep.Streams), records, rep.Took.Round(time.Millisecond))}
	}
	return lines, ok, nil
}

// settleStore restores, from the journal, the job records that the check
// found damaged or that the bucket lacks, and counts what stays unreadable.
func (h *storeHealth) settleStore(ctx context.Context, st *history.Store, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	h.mu.Lock()
	h.missing = missingStreams(h.check)
	damaged := h.check.Damaged() || len(h.missing) > 0
	h.mu.Unlock()
	for _, l := range h.lines() {
		log.Error("damaged store: "+l, zap.String("store", h.check.Store))
	}
	ahead, err := st.JournalAhead(ctx)
	if err != nil {
		log.Warn("compare the job store with its journal", zap.Error(err))
	}
	if ahead || h.check.Stream(jobStream).Damaged() || h.check.Stream(telemetry.JournalStream).Damaged() {
		r, err := st.RestoreJobs(ctx)
		if err != nil {
			log.Error("restore job records from the journal", zap.Error(err))
		}
		h.mu.Lock()
		h.restored = r
		h.mu.Unlock()
		log.Warn("job records restored from the journal", zap.Int("restored", len(r.Restored)), zap.Strings("jobs", r.Restored),
			zap.Int("journaled", r.Journaled), zap.Int("failed", len(r.Failed)))
		damaged = true
	}
	if damaged {
		h.countOrphans(ctx, st, log)
	}
}

// countOrphans counts the step records of jobs that have no record.
func (h *storeHealth) countOrphans(ctx context.Context, st *history.Store, log *zap.Logger) {
	s, err := st.JS.Stream(ctx, telemetry.StepStream)
	if err != nil {
		log.Warn("count step records without a job", zap.Error(err))
		return
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(telemetry.AllSteps))
	if err != nil {
		log.Warn("count step records without a job", zap.Error(err))
		return
	}
	records, jobs := 0, 0
	for subj, n := range info.State.Subjects {
		id := telemetry.JobOfSubject(subj)
		if _, err := st.Jobs.Get(ctx, id); errors.Is(err, jetstream.ErrKeyNotFound) {
			records, jobs = records+int(n), jobs+1
		}
	}
	h.mu.Lock()
	h.orphanRecords, h.orphanJobs = records, jobs
	h.mu.Unlock()
	if jobs > 0 {
		log.Error("step records of jobs whose record is lost", zap.Int("records", records), zap.Int("jobs", jobs))
	}
}

// lines says what is wrong with the store, for api.Info (none when all is well).
func (h *storeHealth) lines() []string {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.check.Lines()
	for _, m := range h.missing {
		out = append(out, fmt.Sprintf("stream %s was not in the store (its files deleted?): the history it held is gone; it was made afresh", m))
	}
	if n := len(h.restored.Restored); n > 0 {
		out = append(out, fmt.Sprintf("job records restored from the journal: %d: %s", n, strings.Join(h.restored.Restored, " ")))
	}
	if n := len(h.restored.Failed); n > 0 {
		out = append(out, fmt.Sprintf("job records that could not be restored from the journal: %d", n))
	}
	if u := h.unreadableJobs(); len(u) > 0 {
		out = append(out, fmt.Sprintf("job records that cannot be read: %d: %s", len(u), strings.Join(u, " ")))
	}
	if h.orphanJobs > 0 {
		out = append(out, fmt.Sprintf("step records that cannot be reached (their job's record is lost): %d, of %d jobs", h.orphanRecords, h.orphanJobs))
	}
	return out
}

func (h *storeHealth) unreadableJobs() []string {
	if h.unreadable == nil {
		return nil
	}
	return h.unreadable()
}

// storeGauge is one gauge of the store's health.
type storeGauge struct {
	stream string
	value  float64
}

// gauges are the store's metrics: records lost per damaged stream, and the
// job records restored, unreadable, and whose steps were left without one.
func (h *storeHealth) gauges() (lost []storeGauge, restored, unreadable, orphans float64) {
	if h == nil {
		return nil, 0, 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.check.Streams {
		lost = append(lost, storeGauge{stream: s.Name, value: float64(s.Lost)})
	}
	return lost, float64(len(h.restored.Restored)), float64(len(h.unreadableJobs()) + len(h.restored.Failed)), float64(h.orphanRecords)
}

package jobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/userfs"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// spoolDir, in a job's checkpoint directory, is where its workers leave the
// step records no daemon took before they ended (a daemon restart under
// them): python/scavenger/_client.py's SPOOL_DIR. The runner publishes them
// when an attempt ends, and before a job goes on from a restart; a restarted
// daemon publishes those of the jobs its predecessor lost before it settles
// them (recover.go). A worker that ends while no daemon answers also leaves
// its end there (telemetry.KindEnd): how its interpreter exited.
//
// The directory is the job owner's: it is read, renamed in and emptied as
// the owner (internal/userfs), one file at a time through the directory's
// descriptor, following no symlink. Only regular files of at most
// maxSpoolFile bytes are read, as a stream of lines; anything else found
// there (a FIFO, a huge or sparse file, a symlink) is removed unread, as the
// owner, and logged.
const spoolDir = ".scavenger-spool"

// A spool file is claimed by a rename before it is read: the worker that
// wrote it renames it to <name>.sending to send it itself once a daemon
// answers, the daemon to <name>.draining to publish it; a file is read by
// whoever renamed it.
const (
	sendingSuffix  = ".sending"
	drainingSuffix = ".draining"
)

// maxSpoolFile bounds a spool file: a worker writes at most its queue (4096
// records) of records of at most telemetry.MaxRecordBytes into one.
const maxSpoolFile = 4096 * telemetry.MaxRecordBytes

// spoolBatchBytes is the size of the step messages a drain publishes.
const spoolBatchBytes = 256 << 10

// spooled is what a drain found in a job's spool.
type spooled struct {
	// published and refused count the spooled step records; copies those
	// the store already held (sent before, their confirmation lost), not
	// stored again.
	published, refused, copies int
	// stored is what the store holds of the job's steps, read at the first
	// spooled record (storedSteps).
	stored map[stepKey]bool
	// ends are the end records of the job's workers (one per rank that
	// ended while no daemon answered).
	ends []telemetry.StepRecord
}

// cleanEnd reports whether every rank of attempt (world of them) ended
// with exit code 0, by the end records found.
func (s spooled) cleanEnd(attempt int) bool {
	world := 0
	ok := map[int]bool{}
	for _, e := range s.ends {
		if e.Attempt != attempt {
			continue
		}
		world = e.World
		ok[e.Rank] = ok[e.Rank] || *e.ExitCode == 0
	}
	if world == 0 {
		return false
	}
	for r := range world {
		if !ok[r] {
			return false
		}
	}
	return true
}

// drainSpool publishes the step records the job's workers spooled and
// removes their files, as the job's owner. Only the job's own records count:
// the directory is its owner's, and no one else's records get in through it.
// With workersGone, the files that a worker (or a daemon) had claimed and
// did not finish are taken too, and unfinished writes removed: nobody is
// left to finish them. A file whose records the store did not take (a full
// state disk, for longer than spoolPatience) stays, for the next drain.
func (g *Registry) drainSpool(ctx context.Context, job api.Job, workersGone bool) spooled {
	log := g.log.With(zap.String("job", job.ID))
	var s spooled
	err := userfs.As(fsID(job.Owner), func() error {
		ck, err := userfs.OpenDir(job.CheckpointDir)
		if err != nil {
			return err
		}
		defer ck.Close()
		dir, err := ck.Sub(spoolDir)
		if err != nil {
			return err
		}
		defer dir.Close()
		names, err := dir.Names()
		if err != nil {
			return err
		}
		slices.Sort(names) // a worker's files in the order it wrote them
		for _, name := range names {
			g.drainFile(ctx, log, job, dir, name, workersGone, &s)
		}
		_ = ck.RemoveDir(spoolDir) // when empty: it is no checkpoint (latestCheckpoint)
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("spooled step records not drained", zap.Error(err))
	}
	if s.published+s.refused+s.copies > 0 || len(s.ends) > 0 {
		log.Info("step records the workers spooled while no daemon took them", zap.Int("published", s.published),
			zap.Int("refused", s.refused), zap.Int("copies", s.copies), zap.Int("ends", len(s.ends)))
	}
	return s
}

// drainFile publishes one spool file and removes it (in the thread As gave
// drainSpool: as the job's owner).
func (g *Registry) drainFile(ctx context.Context, log *zap.Logger, job api.Job, dir *userfs.Dir, name string, workersGone bool, s *spooled) {
	if strings.HasSuffix(name, ".tmp") {
		if workersGone { // a write its worker did not finish
			_ = dir.Remove(name)
		}
		return
	}
	claimed := strings.HasSuffix(name, sendingSuffix) || strings.HasSuffix(name, drainingSuffix)
	if !strings.HasSuffix(name, ".jsonl") && !(workersGone && claimed) {
		return
	}
	path := name
	if !strings.HasSuffix(name, drainingSuffix) {
		if err := dir.Rename(name, name+drainingSuffix); err != nil {
			return // the worker took it
		}
		path += drainingSuffix
	}
	f, err := dir.Open(path, maxSpoolFile)
	if err != nil {
		log.Warn("spool file removed unread", zap.String("file", dir.Path()+"/"+path), zap.Error(err))
		s.refused++
		_ = dir.Remove(path)
		return
	}
	defer f.Close()
	id := job.ID + "-" + strings.TrimSuffix(name, drainingSuffix)
	if err := g.publishSpooled(ctx, job.ID, id, f, s); err != nil {
		log.Warn("publish spooled step records", zap.String("file", dir.Path()+"/"+path), zap.Error(err))
		return
	}
	_ = dir.Remove(path)
}

// publishSpooled reads a spool file line by line and publishes its step
// records in batches; ends are kept in s.
func (g *Registry) publishSpooled(ctx context.Context, job, id string, f io.Reader, s *spooled) error {
	var batch bytes.Buffer
	chunk := 0
	var errs error
	publish := func() {
		if batch.Len() == 0 {
			return
		}
		chunk++
		errs = errors.Join(errs, g.storeSpooled(ctx, g.log, job, fmt.Sprintf("%s-%d", id, chunk), batch.Bytes()))
		batch.Reset()
	}
	err := eachLine(f, telemetry.MaxRecordBytes, func(line []byte) {
		rec, err := telemetry.DecodeStep(line)
		switch {
		case err != nil || rec.Job != job:
			s.refused++
		case rec.Kind == telemetry.KindEnd:
			s.ends = append(s.ends, rec)
		case !rec.IsStep():
			s.refused++
		case g.storedBefore(ctx, job, rec, s):
			s.copies++
		default:
			s.stored[stepKey{rec.Attempt, rec.Rank, rec.Step}] = true
			b, _ := json.Marshal(rec)
			batch.Write(append(b, '\n'))
			s.published++
			if batch.Len() > spoolBatchBytes {
				publish()
			}
		}
	}, func() { s.refused++ })
	publish()
	return errors.Join(err, errs)
}

// eachLine calls line for each non-empty line of r (without its newline),
// and tooLong for each line longer than max, which it skips: it never holds
// more than one line.
func eachLine(r io.Reader, max int, line func([]byte), tooLong func()) error {
	br := bufio.NewReaderSize(r, max+1)
	long := false
	for {
		b, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = true
			continue
		case long:
			long = false
			tooLong()
		case len(bytes.TrimSpace(b)) > 0:
			line(bytes.TrimSuffix(b, []byte("\n")))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// spoolPatience bounds how long one batch of spooled records waits for the
// store (a full state disk) before its file is left for the next drain.
const spoolPatience = 2 * time.Minute

// storeSpooled publishes a batch of spooled step records into the step
// stream and waits for the stream to store it, trying again (for up to
// spoolPatience) while it does not; id makes a second try after a lost
// acknowledgement a duplicate the stream drops.
func (g *Registry) storeSpooled(ctx context.Context, log *zap.Logger, job, id string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, spoolPatience)
	defer cancel()
	return keepTrying(ctx, log, "store spooled step records", func() error {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := g.js.Publish(c, telemetry.StepSubject(job), data, jetstream.WithMsgID(id))
		return err
	})
}

// stepKey names one rank's step of an attempt.
type stepKey struct {
	attempt, rank int
	step          int64
}

// storedBefore reports whether the store already holds rec's step of its
// rank and attempt: a worker spools what it sent and saw no confirmation
// of, and the daemon may have stored it before the confirmation was lost
// (a link cut, a daemon killed after a write). The job's stored steps are
// read once a drain, at its first spooled record.
func (g *Registry) storedBefore(ctx context.Context, job string, rec telemetry.StepRecord, s *spooled) bool {
	if s.stored == nil {
		s.stored = g.storedSteps(ctx, job)
	}
	return s.stored[stepKey{rec.Attempt, rec.Rank, rec.Step}]
}

// storedSteps is every step the store holds of job (an empty set when it
// cannot be read: the spooled records are then stored, copies or not).
func (g *Registry) storedSteps(ctx context.Context, job string) map[stepKey]bool {
	out := map[stepKey]bool{}
	ctx, cancel := context.WithTimeout(ctx, spoolPatience)
	defer cancel()
	err := history.Replay(ctx, g.js, telemetry.StepStream, []string{telemetry.StepSubject(job)}, false, func(m jetstream.Msg) error {
		recs, _ := telemetry.DecodeBatch(m.Data())
		for _, r := range recs {
			if r.IsStep() {
				out[stepKey{r.Attempt, r.Rank, r.Step}] = true
			}
		}
		return nil
	})
	if err != nil {
		g.log.Warn("read the stored steps of a job whose spool is drained", zap.String("job", job), zap.Error(err))
	}
	return out
}

// lateDrain is how long after the end of a job that lost a host its spool
// is drained once more.
const lateDrain = 30 * time.Second

// drainLate drains, lateDrain after its end, the spool of a job an attempt
// of which lost a host (runner.lostHosts): the workers there learn of their
// end only once the link is back, and may spool their last records and
// their end until then. A daemon that stops meanwhile leaves it to the next
// one's recovery.
func (g *Registry) drainLate(job api.Job) {
	select {
	case <-time.After(lateDrain):
		g.drainSpool(g.kill, job, true)
	case <-g.shutdown.Done():
	}
}

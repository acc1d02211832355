package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// spoolDir, in a job's checkpoint directory, is where its workers leave the
// step records no daemon took before they ended (a daemon restart under
// them): python/scavenger/_client.py's SPOOL_DIR. The runner publishes them
// when an attempt ends, and before a job goes on from a restart.
const spoolDir = ".scavenger-spool"

// A spool file is claimed by a rename before it is read: the worker that
// wrote it renames it to <name>.sending to send it itself once a daemon
// answers, the daemon to <name>.draining to publish it; a file is read by
// whoever renamed it.
const (
	sendingSuffix  = ".sending"
	drainingSuffix = ".draining"
)

// drainSpool publishes the step records the job's workers spooled and
// removes their files. Only the job's own step records count: the directory
// is its owner's, and no one else's records get in through it. With
// workersGone, the files that a worker (or a daemon) had claimed and did not
// finish are taken too: nobody is left to finish them. A file whose records
// the store did not take (a full state disk, for longer than spoolPatience)
// stays, for the next drain.
func (g *Registry) drainSpool(ctx context.Context, job api.Job, workersGone bool) {
	log := g.log.With(zap.String("job", job.ID))
	dir := filepath.Join(job.CheckpointDir, spoolDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	taken, refused := 0, 0
	for _, e := range ents {
		name := e.Name()
		if workersGone && strings.HasSuffix(name, ".tmp") { // a write its worker did not finish
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		claimed := strings.HasSuffix(name, sendingSuffix) || strings.HasSuffix(name, drainingSuffix)
		if !strings.HasSuffix(name, ".jsonl") && !(workersGone && claimed) {
			continue
		}
		path := filepath.Join(dir, name)
		if !strings.HasSuffix(name, drainingSuffix) {
			if err := os.Rename(path, path+drainingSuffix); err != nil {
				continue // the worker took it
			}
			path += drainingSuffix
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		recs, bad := telemetry.DecodeBatch(b)
		refused += bad
		var batch bytes.Buffer
		chunk := 0
		publish := func() error {
			if batch.Len() == 0 {
				return nil
			}
			chunk++
			err := g.storeSpooled(ctx, log, job.ID, fmt.Sprintf("%s-%s-%d", job.ID, strings.TrimSuffix(name, drainingSuffix), chunk), batch.Bytes())
			batch.Reset()
			return err
		}
		var perr error
		for _, rec := range recs {
			if rec.Job != job.ID || !rec.IsStep() {
				refused++
				continue
			}
			line, _ := json.Marshal(rec)
			batch.Write(append(line, '\n'))
			taken++
			if batch.Len() > 256<<10 {
				perr = errors.Join(perr, publish())
			}
		}
		if perr = errors.Join(perr, publish()); perr != nil {
			log.Warn("publish spooled step records", zap.String("file", path), zap.Error(perr))
			continue
		}
		_ = os.Remove(path)
	}
	_ = os.Remove(dir) // when empty: it is no checkpoint (latestCheckpoint)
	if taken+refused > 0 {
		log.Info("step records the workers spooled while no daemon took them", zap.Int("published", taken), zap.Int("refused", refused))
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

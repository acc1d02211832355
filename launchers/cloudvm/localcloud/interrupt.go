package localcloud

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// Interrupt reclaims spot instance id, as a cloud does when it needs the
// capacity back: the metadata service shows the rebalance recommendation
// and the spot instance-action at once, with the termination notice time
// after (AWS gives two minutes), when the instance is terminated.
func (c *Cloud) Interrupt(id string, notice time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	in, ok := c.insts[id]
	switch {
	case !ok:
		return fmt.Errorf("interrupt %s: %w", id, provider.ErrNotFound)
	case !in.Instance.Alive():
		return fmt.Errorf("interrupt %s: it is %s", id, in.Instance.State)
	case in.Instance.Market != provider.Spot:
		return fmt.Errorf("interrupt %s: an on-demand instance is not interrupted", id)
	}
	now := time.Now().UTC()
	at := now.Add(notice)
	in.Notice, in.Interrupt = &now, &at
	if err := c.save(in); err != nil {
		return err
	}
	c.log.Info("spot instance interrupted", zap.String("instance", id), zap.Time("terminate_at", at))
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// deadCheck is how often the cloud looks for instances whose init ended
// (their watchdog ended them, or they crashed).
const deadCheck = time.Second

// interrupter terminates interrupted instances when their notice runs out,
// and the instances whose init has ended (a cloud notices a dead machine),
// until ctx is done.
func (c *Cloud) interrupter(ctx context.Context) {
	beat := time.Now()
	for {
		if time.Since(beat) >= heartbeatEvery {
			c.heartbeat()
			beat = time.Now()
		}
		next := deadCheck
		var due []*instance
		now := time.Now()
		c.mu.Lock()
		for _, in := range c.insts {
			if in.Instance.State == provider.Running && in.Machine != nil && !in.Machine.Alive() {
				c.log.Warn("instance ended on its own (its watchdog, or its init died)", zap.String("instance", in.Instance.ID))
				due = append(due, in)
				continue
			}
			if in.Interrupt == nil || !in.Instance.Alive() {
				continue
			}
			if d := in.Interrupt.Sub(now); d <= 0 {
				due = append(due, in)
			} else {
				next = min(next, d)
			}
		}
		for _, in := range due {
			if err := c.terminateLocked(ctx, in); err != nil {
				c.log.Warn("terminate interrupted instance", zap.Error(err))
			}
		}
		c.mu.Unlock()
		if len(due) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-time.After(next):
		}
	}
}

// interruptRequest is the body of POST /interrupt on the admin socket.
type interruptRequest struct {
	Instance string `json:"instance"`
	// Notice is the time until termination ("2m").
	Notice string `json:"notice"`
}

// adminHandler serves the admin socket: POST /interrupt reclaims a spot
// instance; GET /instances lists every instance's Record.
func (c *Cloud) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /interrupt", func(w http.ResponseWriter, r *http.Request) {
		var req interruptRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d, err := time.ParseDuration(req.Notice)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := c.Interrupt(req.Instance, d); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	mux.HandleFunc("GET /instances", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(c.Records())
	})
	return mux
}

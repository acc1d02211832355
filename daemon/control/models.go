package control

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

// What earlier jobs taught, and what this one teaches
//
// With a model store (WithModels), a controller reads, when it is made,
// the prior of its job's signature (api.Signature: its command, or its
// --model-key) from its owner's entries, and gives it to the policy
// (policy.Spec.Prior); the policy may then start the job elsewhere before
// its first step (Start), and probes only where the prior leaves it
// unsure. It saves what the job learnt (policy.Policy.Learned) when the
// policy commits its plan and when it stops; each saving replaces the
// job's last one.

// Models is the model store as a controller uses it (daemon/models).
type Models interface {
	Prior(ctx context.Context, uid uint32, sig string) (*prior.Prior, error)
	Save(ctx context.Context, owner api.Owner, sig, key, job string, l prior.Learned) error
}

// Option configures a controller.
type Option func(*options)

type options struct {
	models Models
	ctx    context.Context
}

// WithModels makes the controller read its job's prior from m (within
// ctx) and save what the job learns there.
func WithModels(ctx context.Context, m Models) Option {
	return func(o *options) { o.ctx, o.models = ctx, m }
}

// storeTimeout bounds one read or write of the model store.
const storeTimeout = 10 * time.Second

// jobStore is a job's part of the model store.
type jobStore struct {
	m     Models
	owner api.Owner
	sig   string
	key   string // what the signature came from, for people
	job   string
	prior *prior.Prior
	log   *zap.Logger
}

// open reads j's prior when there is a store and j has an owner; a store
// that cannot be read leaves the job without one (logged).
func (o options) open(j api.Job, log *zap.Logger) jobStore {
	s := jobStore{sig: api.Signature(j.Command, j.Optimize.ModelKey), key: j.Optimize.ModelKey, job: j.ID, log: log}
	if s.key == "" {
		s.key = strings.Join(j.Command, " ")
	}
	if o.models == nil || j.Owner == nil {
		return s
	}
	s.m, s.owner = o.models, *j.Owner
	ctx, cancel := context.WithTimeout(o.ctx, storeTimeout)
	defer cancel()
	p, err := o.models.Prior(ctx, s.owner.UID, s.sig)
	if err != nil {
		log.Warn("read the model store: the job starts without a prior", zap.String("signature", s.sig), zap.Error(err))
		return s
	}
	if !p.Empty() {
		s.prior = p
		log.Info("the job starts from the model store", zap.String("signature", s.sig), zap.Int("types", len(p.Points)), zap.Int("noise points", len(p.Noise)))
	}
	return s
}

// save stores what the job learnt so far.
func (c *Controller) save(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.saveLocked(ctx)
}

// saveLocked is save with c.mu held.
func (c *Controller) saveLocked(ctx context.Context) {
	s := c.store
	if s.m == nil {
		return
	}
	l := c.loop.Pol.Learned()
	if l.Empty() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := s.m.Save(ctx, s.owner, s.sig, s.key, s.job, l); err != nil {
		s.log.Warn("save the job's models", zap.String("signature", s.sig), zap.Error(err))
	}
}

// Start is where the job starts instead of where it was asked to, when the
// models of its prior say so before its first step (policy.Policy.Start);
// ok is false to start where asked.
func (c *Controller) Start() (api.Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.loop.Pol.Start(c.candidateOf(c.start))
	if !ok {
		return api.Decision{}, false
	}
	dec := decision(c.start, 0, time.Now().UTC(), d)
	if c.cloud != nil {
		dec.To, dec.SpentUSD = c.cloud.cur.Config(d.Config, c.start.LRScale), c.cloud.spentUSD()
	}
	return dec, true
}

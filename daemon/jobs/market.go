package jobs

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// What the launcher knows that the job's controller needs
//
// The controller never calls the launcher (package control). A launcher
// that acquires machines (cloudvm) offers machine types and bills them; the
// runner reads its offers when the controller is made, at each attempt and
// at a pre-emption notice, and its charges when an attempt begins and ends,
// and hands them to the controller as observations.

// newController builds the job's controller over the launcher's offers now.
func (r *runner) newController(ctx context.Context) (*control.Controller, error) {
	offers, err := r.offers(ctx)
	if err != nil {
		return nil, err
	}
	var opts []control.Option
	if r.g.o.Models != nil {
		opts = append(opts, control.WithModels(ctx, r.g.o.Models))
	}
	ctl, err := control.New(r.rec.job, offers, r, r.verdicts, r.log, opts...)
	if err == nil {
		ctl.Pin(r.rec.job.Pinned)
	}
	return ctl, err
}

// startWhereTheModelsSay moves a job that has not started yet to where its
// controller's models say it does best (control.Controller.Start), before
// its first attempt: the decision is recorded, and the attempt starts there.
func (r *runner) startWhereTheModelsSay(ctx context.Context) {
	j := &r.rec.job
	if r.ctl == nil || j.Pinned || j.Attempt != 0 || len(j.Attempts) != 0 || r.from.restore != "" {
		return
	}
	dec, ok := r.ctl.Start()
	if !ok {
		return
	}
	j.Config = dec.To
	dec = addDecision(j, dec)
	r.cur.Store(&current{attempt: 0, cfg: dec.To})
	r.save(ctx)
	r.decided(0, dec)
}

// offers returns the machine types the launcher offers now (nil: none).
func (r *runner) offers(ctx context.Context) ([]plugins.Offer, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	caps, err := r.g.o.Launcher.Capabilities(ctx)
	if err != nil {
		return nil, fmt.Errorf("launcher capabilities: %w", err)
	}
	return caps.Offers, nil
}

// observeOffers hands a cloud job's controller the offers now.
func (r *runner) observeOffers(ctx context.Context) {
	if r.ctl == nil || !r.ctl.Cloud() {
		return
	}
	offers, err := r.offers(ctx)
	if err != nil {
		r.log.Warn("read the launcher's offers for the controller", zap.Error(err))
		return
	}
	r.ctl.SetOffers(offers)
}

// observeCharges hands a cloud job's controller its machines' charges.
func (r *runner) observeCharges(charges []plugins.Charge) {
	if r.ctl != nil && charges != nil {
		r.ctl.SetCharges(charges)
	}
}

// observeMarket hands a cloud job's controller the offers and its
// machines' charges as an attempt begins (its machines are bought).
func (r *runner) observeMarket(ctx context.Context) {
	if r.ctl == nil || !r.ctl.Cloud() {
		return
	}
	r.observeOffers(ctx)
	if b, ok := r.biller(); ok {
		ctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		cs, err := b.Charges(ctx, r.rec.job.ID)
		if err != nil {
			r.log.Warn("read the machines' charges for the controller", zap.Error(err))
			return
		}
		r.observeCharges(cs)
	}
}

// rechooseAfterNotice is where a job whose workers got a pre-emption
// notice goes: its controller's re-choice over the offers now (the
// decision is recorded), or cfg, where it runs, as before.
func (r *runner) rechooseAfterNotice(ctx context.Context, rec telemetry.StepRecord, cfg plugins.Config) plugins.Config {
	if r.ctl == nil || r.rec.job.Pinned {
		return cfg
	}
	r.observeOffers(ctx)
	why := fmt.Sprintf("pre-empted: rank %d received %s", rec.Rank, rec.ID)
	dec, ok := r.ctl.Rechoose(why, true)
	if !ok {
		return cfg
	}
	r.ctl.Leaving(rec.Attempt)
	dec = addDecision(&r.rec.job, dec)
	dec.Words = why + "; " + dec.Words
	r.rec.job.Decisions[len(r.rec.job.Decisions)-1].Words = dec.Words
	r.save(ctx)
	r.decided(rec.Attempt, dec)
	return dec.To
}

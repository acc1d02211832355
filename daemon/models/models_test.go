package models

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/optimizer/prior"
)

func learned(step float64) prior.Learned {
	return prior.Learned{
		Types: map[string][]prior.Point{
			"g4dn.12xlarge": {{Nodes: 1, Replicas: 1, LocalBatch: 32, StepS: step, Steps: 20}, {Nodes: 1, Replicas: 4, LocalBatch: 32, StepS: 2 * step, SyncS: step, Steps: 20}},
			"local":         {{Nodes: 1, Replicas: 1, LocalBatch: 32, StepS: 3 * step, Steps: 20}},
		},
		Noise:     []prior.NoisePoint{{Samples: 100, Phi: 10}, {Samples: 1000, Phi: 40}},
		RelaunchS: []float64{4},
	}
}

// TestStore: a job's learning saved, merged with a second job's, read back
// as the prior of a job of the same signature and as speed ratios for
// another; listed by owner; forgotten by its owner only.
func TestStore(t *testing.T) {
	_, js := testnats.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket, History: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := New(kv)
	alice, bob := api.Owner{UID: 1000, User: "alice"}, api.Owner{UID: 1001, User: "bob"}
	sig := api.Signature([]string{"python", "train.py"}, "")
	if err := s.Save(ctx, alice, sig, "python train.py", "j1", learned(0.1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, alice, sig, "python train.py", "j2", learned(0.3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, alice, sig, "python train.py", "j2", learned(0.3)); err != nil { // the same job again
		t.Fatal(err)
	}
	other := api.Signature(nil, "other")
	if err := s.Save(ctx, alice, other, "other", "j3", learned(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, bob, sig, "python train.py", "j4", learned(5)); err != nil {
		t.Fatal(err)
	}

	mine, err := s.List(ctx, &alice.UID, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 4 {
		t.Fatalf("alice has %d entries, want 4 (2 signatures × 2 types): %+v", len(mine), mine)
	}
	var e api.ModelEntry
	for _, m := range mine {
		if m.Signature == sig && m.Type == "g4dn.12xlarge" {
			e = m
		}
	}
	if e.Jobs != 2 || e.Job != "j2" || e.User != "alice" || len(e.Points) != 2 || e.Points[0].StepS < 0.19 || e.Points[0].StepS > 0.21 || len(e.RelaunchS) != 2 {
		t.Errorf("merged entry %+v: want 2 jobs, the mean step time 0.2 at the shared configuration", e)
	}
	all, err := s.List(ctx, nil, sig)
	if err != nil || len(all) != 4 {
		t.Errorf("every owner's entries of %s: %d, %v", sig, len(all), err)
	}

	p, err := s.Prior(ctx, alice.UID, sig)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Points["g4dn.12xlarge"]) != 2 || len(p.Noise) != 2 || p.RelaunchS == 0 {
		t.Errorf("prior %+v", p)
	}
	if r, ok := p.Speed[[2]string{"g4dn.12xlarge", "local"}]; !ok || r.N != 1 {
		t.Errorf("speed ratio from alice's other signature: %+v, %v", r, ok)
	}
	fresh, err := s.Prior(ctx, 4242, sig)
	if err != nil || !fresh.Empty() {
		t.Errorf("a user with no entries: %+v, %v", fresh, err)
	}

	n, err := s.Forget(ctx, bob.UID, sig, "local")
	if err != nil || n != 1 {
		t.Errorf("bob forgot %d of his local entry: %v", n, err)
	}
	if n, err := s.Forget(ctx, alice.UID, sig, ""); err != nil || n != 2 {
		t.Errorf("alice forgot %d of her 2 entries of %s: %v", n, sig, err)
	}
	left, _ := s.List(ctx, nil, "")
	if len(left) != 3 {
		t.Errorf("%d entries left, want alice's other 2 and bob's g4dn one", len(left))
	}
	if _, err := s.Forget(ctx, alice.UID, "bad.sig", ""); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("bad signature: %v", err)
	}
}

func TestKey(t *testing.T) {
	for _, c := range []struct{ typ, want string }{
		{"local", "7.cmd-ab.local"},
		{"g4dn.12xlarge", "7.cmd-ab.g4dn.12xlarge"},
		{"a b", "7.cmd-ab.x612062"},
		{".x", "7.cmd-ab.x2e78"},
	} {
		if got, err := key(7, "cmd-ab", c.typ); err != nil || got != c.want {
			t.Errorf("key(%q) = %q, %v; want %q", c.typ, got, err, c.want)
		}
	}
	if _, err := key(7, "a.b", "local"); err == nil {
		t.Error("a signature with a dot")
	}
}

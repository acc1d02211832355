package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
)

// ownedModels is a model store of entries by owner (the real one is
// daemon/models, tested there): only the verbs' rules are under test here.
type ownedModels struct{ forgot []uint32 }

func (m *ownedModels) List(_ context.Context, uid *uint32, _ string) ([]api.ModelEntry, error) {
	all := []api.ModelEntry{{UID: 1000, Signature: "cmd-a"}, {UID: 1001, Signature: "cmd-b"}}
	if uid == nil {
		return all, nil
	}
	var out []api.ModelEntry
	for _, e := range all {
		if e.UID == *uid {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *ownedModels) Forget(_ context.Context, uid uint32, _, _ string) (int, error) {
	m.forgot = append(m.forgot, uid)
	return 1, nil
}

// TestModelVerbs: a user lists and forgets their own entries only; root
// lists and forgets anyone's.
func TestModelVerbs(t *testing.T) {
	m := &ownedModels{}
	s := &Server{o: Options{Models: m}}
	alice, root := api.Owner{UID: 1000, User: "alice"}, api.Owner{UID: 0, User: "root"}
	body := func(v any) []byte { b, _ := json.Marshal(v); return b }
	ctx := context.Background()

	got, err := s.models(ctx, alice, nil)
	if es, _ := got.([]api.ModelEntry); err != nil || len(es) != 1 || es[0].UID != 1000 {
		t.Errorf("alice lists %+v, %v: want her one entry", got, err)
	}
	if _, err := s.models(ctx, alice, body(api.ModelsRequest{All: true})); !errors.Is(err, ErrForbidden) {
		t.Errorf("alice lists everyone's: %v", err)
	}
	if got, err := s.models(ctx, root, body(api.ModelsRequest{All: true})); err != nil || len(got.([]api.ModelEntry)) != 2 {
		t.Errorf("root lists %+v, %v", got, err)
	}
	bob := uint32(1001)
	if _, err := s.forgetModel(ctx, alice, body(api.ForgetModelRequest{Signature: "cmd-b", UID: &bob})); !errors.Is(err, ErrForbidden) {
		t.Errorf("alice forgets bob's: %v", err)
	}
	if _, err := s.forgetModel(ctx, alice, body(api.ForgetModelRequest{Signature: "cmd-a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.forgetModel(ctx, root, body(api.ForgetModelRequest{Signature: "cmd-b", UID: &bob})); err != nil {
		t.Fatal(err)
	}
	if len(m.forgot) != 2 || m.forgot[0] != 1000 || m.forgot[1] != 1001 {
		t.Errorf("forgot the entries of %v, want alice's then bob's", m.forgot)
	}
	if _, err := (&Server{}).models(ctx, alice, nil); !errors.Is(err, errNoModels) {
		t.Errorf("no store: %v", err)
	}
}

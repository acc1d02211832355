package apiserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/scavenger-ml/scavenger/api"
)

// Models is the model store the models verbs read and forget in
// (daemon/models).
type Models interface {
	List(ctx context.Context, uid *uint32, sig string) ([]api.ModelEntry, error)
	Forget(ctx context.Context, uid uint32, sig, typ string) (int, error)
}

// errNoModels answers the models verbs of a daemon without a store.
var errNoModels = errors.New("this scavd keeps no model store")

// models lists the caller's model store entries; root may ask for every
// user's.
func (s *Server) models(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.ModelsRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decode(api.VerbModels, body, &req); err != nil {
			return nil, err
		}
	}
	if s.o.Models == nil {
		return nil, errNoModels
	}
	if req.All && !who.Root() {
		return nil, fmt.Errorf("%w: only root lists every user's models", ErrForbidden)
	}
	uid := &who.UID
	if req.All {
		uid = nil
	}
	return s.o.Models.List(ctx, uid, req.Signature)
}

// forgetModel removes entries of the caller's, or of the user root names.
func (s *Server) forgetModel(ctx context.Context, who api.Owner, body []byte) (any, error) {
	var req api.ForgetModelRequest
	if err := decode(api.VerbForgetModel, body, &req); err != nil {
		return nil, err
	}
	if s.o.Models == nil {
		return nil, errNoModels
	}
	uid := who.UID
	if req.UID != nil && *req.UID != who.UID {
		if !who.Root() {
			return nil, fmt.Errorf("%w: only root forgets another user's models", ErrForbidden)
		}
		uid = *req.UID
	}
	n, err := s.o.Models.Forget(ctx, uid, req.Signature, req.Type)
	if err != nil {
		return nil, err
	}
	return api.ForgetModelReply{Forgot: n}, nil
}

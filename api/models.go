package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// A job's model store entries (scavctl models)
//
// What a job under a policy measures of its command — each machine type's
// step times at the configurations it ran, the gradient noise scale along
// its training, its relaunches — is kept per owner, job signature and
// machine type, so that a later job with the same signature starts from it
// (and a job with another one learns from it how machine types compare).
// The signature is derived from the command and its arguments, or named
// with --model-key (Optimize.ModelKey). An owner sees and forgets only
// their own entries; root every user's.

// ModelKeyPattern is what a model key may be.
var ModelKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Signature is the model store's name for a job: "key-" and its model key
// when it names one, else "cmd-" and a hash of its command and arguments.
func Signature(command []string, modelKey string) string {
	if modelKey != "" {
		return "key-" + modelKey
	}
	h := sha256.Sum256([]byte(strings.Join(command, "\x00")))
	return "cmd-" + hex.EncodeToString(h[:8])
}

// ModelPoint is one configuration's measured mean step and sync time on a
// machine type, and the steps that measured it.
type ModelPoint struct {
	Nodes      int     `json:"nodes"`
	Replicas   int     `json:"replicas"`
	LocalBatch float64 `json:"local_batch"`
	StepS      float64 `json:"step_s"`
	SyncS      float64 `json:"sync_s"`
	Steps      float64 `json:"steps"`
}

// ModelNoise is the gradient noise scale Phi (samples) after Samples
// scale-invariant samples of training.
type ModelNoise struct {
	Samples float64 `json:"samples"`
	Phi     float64 `json:"phi"`
}

// ModelEntry is one stored (owner, signature, machine type).
type ModelEntry struct {
	UID  uint32 `json:"uid"`
	User string `json:"user,omitempty"`
	// Signature names the job (Signature); Key is what it came from: the
	// command line, or the model key.
	Signature string `json:"signature"`
	Key       string `json:"key"`
	Type      string `json:"type"`
	// Updated is when a job last added to it; Job names that job and Jobs
	// counts the jobs that did.
	Updated time.Time `json:"updated"`
	Job     string    `json:"job,omitempty"`
	Jobs    int       `json:"jobs"`
	// Points are the type's measured configurations; Noise the noise scale
	// along training and RelaunchS the measured relaunches, as the newest
	// job saw them.
	Points    []ModelPoint `json:"points,omitempty"`
	Noise     []ModelNoise `json:"noise,omitempty"`
	RelaunchS []float64    `json:"relaunch_s,omitempty"`
	// Earlier is the entry as the jobs before Job left it (Job saves as
	// it runs; each saving replaces its own last one).
	Earlier *ModelEntry `json:"earlier,omitempty"`
}

// API verbs of the model store.
const (
	// VerbModels lists model store entries (ModelsRequest).
	VerbModels = "models"
	// VerbForgetModel removes model store entries (ForgetModelRequest).
	VerbForgetModel = "forget-model"
)

// ModelsRequest asks for the caller's model store entries, or with All
// (root only) every user's; Signature, when set, only that signature's.
type ModelsRequest struct {
	All       bool   `json:"all,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// ForgetModelRequest removes the entries of a signature (only of Type when
// set) of the caller, or of UID (root only).
type ForgetModelRequest struct {
	Signature string  `json:"signature"`
	Type      string  `json:"type,omitempty"`
	UID       *uint32 `json:"uid,omitempty"`
}

// ForgetModelReply says how many entries were removed.
type ForgetModelReply struct {
	Forgot int `json:"forgot"`
}

// Models lists the caller's model store entries (all: every user's, root
// only), only signature's when it is not empty.
func (c *Client) Models(ctx context.Context, signature string, all bool) ([]ModelEntry, error) {
	var es []ModelEntry
	return es, c.call(ctx, VerbModels, ModelsRequest{All: all, Signature: signature}, &es)
}

// ForgetModel removes the entries of signature (of typ only when set) of
// the caller, or of uid (root only; nil: the caller's); it returns how many.
func (c *Client) ForgetModel(ctx context.Context, signature, typ string, uid *uint32) (int, error) {
	if signature == "" {
		return 0, fmt.Errorf("forget model: %w: no signature", ErrBadRequest)
	}
	var r ForgetModelReply
	return r.Forgot, c.call(ctx, VerbForgetModel, ForgetModelRequest{Signature: signature, Type: typ, UID: uid}, &r)
}

package sim

import "errors"

// Sentinel errors returned (wrapped) by the simulator.
var (
	// ErrNoCandidates means the traces yield no candidate configuration.
	ErrNoCandidates = errors.New("no candidates")
	// ErrBadStart means the --start configuration is not a candidate.
	ErrBadStart = errors.New("start is not a candidate")
	// ErrBadDecision means a policy chose a configuration outside the
	// candidates.
	ErrBadDecision = errors.New("policy chose a non-candidate")
	// ErrStuck means the simulation stopped making progress.
	ErrStuck = errors.New("simulation makes no progress")
	// ErrBadOptions means the options are unusable.
	ErrBadOptions = errors.New("bad options")
	// ErrNoPredictions means the policy made no predictions to plan with.
	ErrNoPredictions = errors.New("policy made no predictions")
)

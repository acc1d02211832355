package daemon

import "github.com/scavenger-ml/scavenger/api"

// Temporary aliases while the daemon is split (issue 10); removed by the end of it.
type (
	Job                 = api.Job
	JobState            = api.JobState
	Attempt             = api.Attempt
	MoveTiming          = api.MoveTiming
	Decision            = api.Decision
	CandidatePrediction = api.CandidatePrediction
	Optimize            = api.Optimize
	RunRequest          = api.RunRequest
	ResumePoint         = api.ResumePoint
	Duration            = api.Duration
	Allocation          = api.Allocation
	AllocationEvent     = api.AllocationEvent
	Info                = api.Info
	Stats               = api.Stats
	IngestStats         = api.IngestStats
	ResumeRequest       = api.ResumeRequest
	MoveRequest         = api.MoveRequest
	StopRequest         = api.StopRequest
	JobRequest          = api.JobRequest
	reply               = api.Reply
)

const (
	StateStarting   = api.StateStarting
	StateRunning    = api.StateRunning
	StateStopping   = api.StateStopping
	StateSucceeded  = api.StateSucceeded
	StateFailed     = api.StateFailed
	StateStopped    = api.StateStopped
	VerbPing        = api.VerbPing
	VerbRun         = api.VerbRun
	VerbStop        = api.VerbStop
	VerbJob         = api.VerbJob
	VerbJobs        = api.VerbJobs
	VerbStats       = api.VerbStats
	VerbMove        = api.VerbMove
	VerbResume      = api.VerbResume
	VerbAllocation  = api.VerbAllocation
	VerbAllocations = api.VerbAllocations
	AllocationBegin = api.AllocationBegin
	AllocationEnd   = api.AllocationEnd
	DefaultListen   = api.DefaultListen
)

var (
	ErrBadRequest      = api.ErrBadRequest
	ErrNoJob           = api.ErrNoJob
	ValidAllocationKey = api.ValidAllocationKey
	parseSignal        = api.ParseSignal
	apiTimeout         = api.Timeout
	DefaultStateDir    = api.DefaultStateDir
	ReadDiscovery      = api.ReadDiscovery
	writeDiscovery     = api.WriteDiscovery
	removeDiscovery    = api.RemoveDiscovery
)

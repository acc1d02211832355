package telemetry

import "strings"

// NATS subjects, streams and buckets, built here and nowhere else.
const (
	// APIPrefix prefixes the request/reply API that scavd serves for scavctl.
	APIPrefix = "scav.api."
	// StepStream is the JetStream stream holding step records (subjects scav.job.*.step).
	StepStream = "SCAV_STEPS"
	// OutputStream is the JetStream stream holding worker output and job
	// events (subjects scav.job.*.log and scav.job.*.event), in one stream so
	// that a reader sees a job's lines and its end in the order they happened.
	OutputStream = "SCAV_OUTPUT"
	// NodeStream is the JetStream stream holding node samples (subjects
	// scav.node.*.gpu and scav.node.*.host).
	NodeStream = "SCAV_NODE"
	// JobBucket is the key-value bucket of job records, keyed by job id.
	JobBucket = "scav_jobs"
	// JournalStream is the job records' second copy (subjects
	// scav.job.*.record, the newest of each job): what a damaged job
	// bucket is restored from.
	JournalStream = "SCAV_JOURNAL"
	// AllocationBucket is the key-value bucket of scheduler allocations (Slurm
	// jobs) that prolog/epilog hooks reported, keyed by scheduler and id.
	AllocationBucket = "scav_allocations"
	// JobIndexBucket is the job index: a summary of each job, keyed by job
	// id (daemon/jobindex).
	JobIndexBucket = "scav_job_index"
	// StepDigestBucket holds what each job's step records add up to, keyed
	// by job id (daemon/aggregates).
	StepDigestBucket = "scav_step_digests"
	// ModelBucket is the model store's: what jobs measured, keyed by owner,
	// job signature and machine type (daemon/models).
	ModelBucket = "scav_models"
)

// APISubject is the request subject of one API verb, e.g. "scav.api.run".
func APISubject(verb string) string { return APIPrefix + verb }

// StepSubject is where the step records of job id are published.
func StepSubject(job string) string { return "scav.job." + job + ".step" }

// StoredStepSubject is where the step stream republishes each message of
// job id's steps once it is stored, with its stream sequence and the
// sequence of the job's message before it in its headers (the stream's
// RePublish): what the job's runner reads, so that it sees what the store
// holds, in its order, and can tell when it missed a message.
func StoredStepSubject(job string) string { return "scav.stored." + job + ".step" }

// LogSubject is where the output lines of job id's workers are published:
// the first of them (its head; see daemon/jobs/outputcap.go).
func LogSubject(job string) string { return "scav.job." + job + ".log" }

// LogTailSubject is where job id's output lines past its head are
// published; the output stream keeps the newest history.OutputKeepPerSubject.
func LogTailSubject(job string) string { return "scav.job." + job + ".logtail" }

// JobSubjects matches every subject of job id: its steps, output and events.
func JobSubjects(job string) string { return "scav.job." + job + ".>" }

// EventSubject is where job id's lifecycle events are published.
func EventSubject(job string) string { return "scav.job." + job + ".event" }

// RecordSubject is where job id's record is journaled (JournalStream).
func RecordSubject(job string) string { return "scav.job." + job + ".record" }

// ControlSubject is where the controller publishes Control messages for job id's workers.
func ControlSubject(job string) string { return "scav.job." + job + ".control" }

// AckSubject is where node daemons publish the workers' acks of Control messages.
func AckSubject(job string) string { return "scav.job." + job + ".ack" }

// PreemptSubject is where node daemons publish the workers' pre-emption notices for job id.
func PreemptSubject(job string) string { return "scav.job." + job + ".preempt" }

// JobOfSubject is the job id of a job subject ("scav.job.<id>.<kind>"), or "".
func JobOfSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, "scav.job.")
	if !ok {
		return ""
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return ""
	}
	return rest[:i]
}

// AllSteps, AllLogs, AllEvents, AllControl and AllRecords match every job's subjects of that kind.
const (
	AllSteps   = "scav.job.*.step"
	AllLogs    = "scav.job.*.log"
	AllTails   = "scav.job.*.logtail"
	AllEvents  = "scav.job.*.event"
	AllControl = "scav.job.*.control"
	AllRecords = "scav.job.*.record"
	// AllStoredSteps is StoredStepSubject of every job, as the step
	// stream's RePublish destination writes it.
	AllStoredSteps = "scav.stored.{{wildcard(1)}}.step"
)

// NodeSubject is where node samples of one kind ("gpu", "host") are published.
func NodeSubject(node, kind string) string { return "scav.node." + node + "." + kind }

// AllNodeGPU and AllNodeHost match every node's samples of that kind.
const (
	AllNodeGPU  = "scav.node.*.gpu"
	AllNodeHost = "scav.node.*.host"
)

package api

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/plugins"
)

// JobSummary is what the job index keeps of a job: what listing, filtering
// and naming a job need, a few hundred bytes whatever the job's history.
// Its JSON fields are those of Job with the same meaning. The job's runner
// writes it with the record (daemon/jobs), so it says what the record says.
type JobSummary struct {
	ID       string         `json:"id"`
	Name     string         `json:"name"`
	Command  []string       `json:"command"`
	Owner    *Owner         `json:"owner,omitempty"`
	Node     string         `json:"node"`
	Launcher string         `json:"launcher"`
	State    JobState       `json:"state"`
	Phase    Phase          `json:"phase,omitempty"`
	Attempt  int            `json:"attempt"`
	Config   plugins.Config `json:"config"`
	Created  time.Time      `json:"created"`
	Started  *time.Time     `json:"started,omitempty"`
	Ended    *time.Time     `json:"ended,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	// LastStep is the newest step its attempts recorded.
	LastStep int64 `json:"last_step,omitempty"`
	// Kept: `scavctl keep` exempts it from the retention of finished jobs.
	Kept bool `json:"kept,omitempty"`
}

// summaryCommandBytes bounds the command a summary keeps (the record has
// all of it).
const summaryCommandBytes = 512

// Summary is the job's summary for the job index.
func (j Job) Summary() JobSummary {
	s := JobSummary{
		ID: j.ID, Name: j.Name, Node: j.Node, Launcher: j.Launcher, State: j.State, Phase: j.Phase,
		Attempt: j.Attempt, Config: j.Config, Created: j.Created, Started: j.Started, Ended: j.Ended, ExitCode: j.ExitCode,
	}
	if j.Owner != nil {
		s.Owner = &Owner{UID: j.Owner.UID, GID: j.Owner.GID, User: j.Owner.User}
	}
	n := 0
	for _, a := range j.Command {
		if n += len(a); n > summaryCommandBytes {
			s.Command = append(s.Command, "...")
			break
		}
		s.Command = append(s.Command, a)
	}
	for _, a := range j.Attempts {
		s.LastStep = max(s.LastStep, a.LastStep)
	}
	return s
}

// OwnedBy reports whether the job is who's own (root's: the jobs of no
// owner, too), as a listing of who's jobs counts them.
func (s JobSummary) OwnedBy(who Owner) bool {
	if s.Owner == nil {
		return who.Root()
	}
	return s.Owner.UID == who.UID
}

// Before orders summaries as listings do: by creation, then by id.
func (s JobSummary) Before(o JobSummary) bool {
	if !s.Created.Equal(o.Created) {
		return s.Created.Before(o.Created)
	}
	return s.ID < o.ID
}

// StateActive and StateEnded are the two filters of a listing (JobsRequest.State)
// that are not a state: jobs that have not ended, and jobs that have.
const (
	StateActive = "active"
	StateEnded  = "ended"
)

// JobsRequest asks for the jobs of the job index (the body of scav.api.jobs,
// answered with their records, and of scav.api.list, answered with a
// JobPage): the caller's jobs, or with All (root only) every user's, that
// match every filter given, the newest Limit of them, oldest first.
type JobsRequest struct {
	All bool `json:"all,omitempty"`
	// State is a JobState, StateActive or StateEnded.
	State string `json:"state,omitempty"`
	// Name keeps the jobs of that name; User those of that owner (root).
	Name string `json:"name,omitempty"`
	User string `json:"user,omitempty"`
	// Since keeps the jobs created at or after it.
	Since *time.Time `json:"since,omitempty"`
	// Before, a job id, keeps the jobs created before that job: the next
	// page of a listing is the one Before its oldest job (JobPage.Before).
	Before string `json:"before,omitempty"`
	// Limit is the most jobs a page holds, the newest (0: every one).
	Limit int `json:"limit,omitempty"`
	// Records asks for the jobs' whole records (JobPage.Records) instead of
	// their summaries.
	Records bool `json:"records,omitempty"`
}

// Validate checks the request's filters.
func (r JobsRequest) Validate() error {
	switch JobState(r.State) {
	case "", StateStarting, StateRunning, StateStopping, StateSucceeded, StateFailed, StateStopped, StateActive, StateEnded:
	default:
		return fmt.Errorf("%w: state %q: use starting, running, stopping, succeeded, failed, stopped, active or ended", ErrBadRequest, r.State)
	}
	if r.Limit < 0 {
		return fmt.Errorf("%w: limit %d: use 0 (no limit) or more", ErrBadRequest, r.Limit)
	}
	return nil
}

// Match reports whether s passes the request's filters (not the page's
// bounds: Before and Limit).
func (r JobsRequest) Match(s JobSummary) bool {
	switch r.State {
	case "":
	case StateActive:
		if s.State.Done() {
			return false
		}
	case StateEnded:
		if !s.State.Done() {
			return false
		}
	default:
		if string(s.State) != r.State {
			return false
		}
	}
	if r.Name != "" && s.Name != r.Name {
		return false
	}
	if r.User != "" && (s.Owner == nil && r.User != "root" || s.Owner != nil && s.Owner.User != r.User) {
		return false
	}
	return r.Since == nil || !s.Created.Before(*r.Since)
}

// JobPage is a page of the job index (the reply of scav.api.list): the
// summaries of the jobs, or their records when asked, oldest first.
type JobPage struct {
	Jobs    []JobSummary `json:"jobs"`
	Records []Job        `json:"records,omitempty"`
	// More counts the older jobs that match but are not on the page; Before
	// is then the JobsRequest.Before of the next page (the oldest job's id).
	More   int    `json:"more,omitempty"`
	Before string `json:"before,omitempty"`
}

// ResolveRequest names a job as a person does (the body of scav.api.resolve):
// by id, by a prefix of its id no other job shares, or by its name (the
// newest job of that name). All (root only) looks among every user's jobs.
type ResolveRequest struct {
	Ref string `json:"ref"`
	All bool   `json:"all,omitempty"`
}

// Resolved is the job a ResolveRequest named, with a note when several
// jobs had that name.
type Resolved struct {
	Job  Job    `json:"job"`
	Note string `json:"note,omitempty"`
}

// Pick finds ref among jobs: an id, a name (the newest of that name: a name
// beats an id prefix), or an id prefix no other job shares. note says which
// of several jobs of that name was taken; the error names the ones an id
// prefix fits when it fits several.
func Pick(jobs []JobSummary, ref string) (JobSummary, string, error) {
	var prefixed, named []JobSummary
	for _, j := range jobs {
		switch {
		case j.ID == ref:
			return j, "", nil
		case strings.HasPrefix(j.ID, ref):
			prefixed = append(prefixed, j)
		}
		if j.Name == ref {
			named = append(named, j)
		}
	}
	if len(named) > 0 {
		sort.SliceStable(named, func(a, b int) bool { return named[b].Before(named[a]) })
		note := ""
		if len(named) > 1 {
			note = fmt.Sprintf("%d jobs are named %s; %s is the newest (give an id for another: %s)", len(named), ref, named[0].ID, summaryIDs(named[1:]))
		}
		return named[0], note, nil
	}
	switch len(prefixed) {
	case 1:
		return prefixed[0], "", nil
	case 0:
		return JobSummary{}, "", fmt.Errorf("job %s: %w: no job of yours has that id, id prefix or name (see scavctl jobs)", ref, ErrNoJob)
	}
	return JobSummary{}, "", ambiguous(fmt.Sprintf("job %s: %d jobs' ids start with it (%s): give more of the id", ref, len(prefixed), summaryIDs(prefixed)))
}

// ambiguous is a job reference that fits several jobs: a bad request,
// worded without the words "bad request".
type ambiguous string

func (e ambiguous) Error() string        { return string(e) }
func (e ambiguous) Is(target error) bool { return target == ErrBadRequest }

// summaryIDs lists the jobs' ids, at most ten of them.
func summaryIDs(jobs []JobSummary) string {
	out := make([]string, 0, min(len(jobs), 11))
	for i, j := range jobs {
		if i == 10 {
			out = append(out, fmt.Sprintf("and %d more", len(jobs)-10))
			break
		}
		out = append(out, j.ID)
	}
	return strings.Join(out, ", ")
}

// KeepRequest exempts a finished job from retention, or with Undo makes it
// subject to it again (the body of scav.api.keep).
type KeepRequest struct {
	Job  string `json:"job"`
	Undo bool   `json:"undo,omitempty"`
}

package daemon

import (
	"sort"
)

// sortJobs orders jobs oldest first.
func sortJobs(jobs []Job) {
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Created.Before(jobs[b].Created) })
}

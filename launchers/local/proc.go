package local

import "github.com/scavenger-ml/scavenger/internal/procstat"

// groupMembers lists the processes of process group pgid.
func groupMembers(pgid int) ([]procstat.Stat, error) {
	var out []procstat.Stat
	err := procstat.Each(func(st procstat.Stat) {
		if st.PGRP == pgid {
			out = append(out, st)
		}
	})
	return out, err
}

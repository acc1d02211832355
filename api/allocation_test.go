package api

import "testing"

func TestValidAllocationKey(t *testing.T) {
	for key, want := range map[string]bool{
		"slurm.4711": true, "slurm.4711_3": true, "pbs.12-x": true,
		"": false, "slurm": false, "slurm.": false, ".4711": false, "slurm.47.11": false,
		"slurm.47 11": false, "slurm.>": false, "slurm.*": false,
	} {
		if got := ValidAllocationKey(key); got != want {
			t.Errorf("ValidAllocationKey(%q) = %v, want %v", key, got, want)
		}
	}
}

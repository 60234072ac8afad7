package launch

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// myCPUs lists the CPUs this process may run on.
func myCPUs(t *testing.T) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for id := 0; id < len(set)*64; id++ {
		if set.IsSet(id) {
			cpus = append(cpus, id)
		}
	}
	return cpus
}

// ranksCPUs runs n "cpus" ranks with bind and returns what each reported
// as its Cpus_allowed_list.
func ranksCPUs(t *testing.T, n int, bind string) map[string]string {
	cfg, stdout, stderr := job(t, n, "cpus")
	cfg.Bind = bind
	if _, err := runJob(t, testCtx(t), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr)
	}
	cpus := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\[(\d+)\] cpus (\S+)$`).FindAllStringSubmatch(stdout.String(), -1) {
		cpus[m[1]] = m[2]
	}
	if len(cpus) != n {
		t.Fatalf("want %d ranks' CPU lists, got:\n%s", n, stdout)
	}
	return cpus
}

func TestBindToCore(t *testing.T) {
	mine := myCPUs(t)
	if len(mine) < 2 {
		t.Skipf("needs 2 CPUs, this process may use %v", mine)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	plan := planBinding(2, cpus)
	got := ranksCPUs(t, 2, "") // the default
	for r := range 2 {
		if want := cpuList(plan[r]); got[fmt.Sprint(r)] != want {
			t.Errorf("rank %d runs on CPUs %s, want %s (all: %v)", r, got[fmt.Sprint(r)], want, mine)
		}
	}
	if got["0"] == got["1"] {
		t.Errorf("both ranks on CPUs %s", got["0"])
	}
	// The forking thread got its own mask back.
	if after := myCPUs(t); !slices.Equal(after, mine) {
		t.Errorf("vcclrun's CPUs after the start: %v, before: %v", after, mine)
	}
}

// With --bind-to none, and when oversubscribed, every rank may run on every
// CPU vcclrun may.
func TestNotBound(t *testing.T) {
	all := cpuList(myCPUs(t))
	n := len(myCPUs(t)) + 1
	for name, c := range map[string]struct {
		n    int
		bind string
	}{"none": {2, BindNone}, "oversubscribed": {n, BindCore}} {
		for r, cpus := range ranksCPUs(t, c.n, c.bind) {
			if cpus != all {
				t.Errorf("%s: rank %s runs on CPUs %s, want all of %s", name, r, cpus, all)
			}
		}
	}
}

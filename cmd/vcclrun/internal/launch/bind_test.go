package launch

import (
	"reflect"
	"testing"
)

// cpusOf builds a topology: pkgCore[i] = {package, core} of CPU i.
func cpusOf(pkgCore ...[2]int) []cpuInfo {
	cpus := make([]cpuInfo, len(pkgCore))
	for i, pc := range pkgCore {
		cpus[i] = cpuInfo{id: i, pkg: pc[0], core: pc[1], hasCore: true}
	}
	return cpus
}

func TestPlanBinding(t *testing.T) {
	// 2 packages × 2 cores × 2 threads, siblings numbered apart as Linux
	// does on most x86 hosts: CPUs 0-3 are first threads, 4-7 second.
	smt := cpusOf([2]int{0, 0}, [2]int{0, 1}, [2]int{1, 0}, [2]int{1, 1},
		[2]int{0, 0}, [2]int{0, 1}, [2]int{1, 0}, [2]int{1, 1})
	unknown := []cpuInfo{{id: 2}, {id: 5}, {id: 7}}
	cases := []struct {
		name string
		n    int
		cpus []cpuInfo
		want [][]int
	}{
		{"one rank takes everything", 1, smt, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}},
		{"a package each", 2, smt, [][]int{{0, 1, 4, 5}, {2, 3, 6, 7}}},
		{"a core each, with its sibling", 4, smt, [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
		{"uneven split keeps whole cores", 3, smt, [][]int{{0, 4}, {1, 5}, {2, 3, 6, 7}}},
		{"more ranks than cores: threads", 8, smt, [][]int{{0}, {4}, {1}, {5}, {2}, {6}, {3}, {7}}},
		{"oversubscribed: not bound", 9, smt, nil},
		{"unknown topology: CPUs as cores", 2, unknown, [][]int{{2}, {5, 7}}},
		{"two CPUs, two ranks", 2, cpusOf([2]int{0, 0}, [2]int{0, 1}), [][]int{{0}, {1}}},
		{"no ranks", 0, smt, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := planBinding(c.n, c.cpus)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("planBinding(%d) = %v, want %v", c.n, got, c.want)
			}
		})
	}
}

func TestCPUList(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{1, 3, 4, 6, 7, 8}, "1,3-4,6-8"},
		{nil, ""},
	} {
		if got := cpuList(c.cpus); got != c.want {
			t.Errorf("cpuList(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
}

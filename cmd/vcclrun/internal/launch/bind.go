package launch

import (
	"cmp"
	"slices"
)

// cpuInfo is one CPU the job may run on, with the core it belongs to.
type cpuInfo struct {
	id      int
	pkg     int // physical package (socket)
	core    int // core id within the package
	hasCore bool
}

// planBinding splits the CPUs vcclrun may use among n ranks, as Open MPI
// binds ranks by default: each rank gets whole cores of its own (all their
// hardware threads), contiguous in package order, so that two ranks never
// share a core and a rank's runtime threads (Go's scheduler, the telemetry
// collector, transport pollers) still spread over its cores. With fewer
// cores than ranks but enough CPUs, ranks get distinct hardware threads;
// with fewer CPUs than ranks (oversubscribed) nothing is bound and nil is
// returned.
func planBinding(n int, cpus []cpuInfo) [][]int {
	if n < 1 || len(cpus) < n {
		return nil
	}
	type core struct {
		pkg, id int
		cpus    []int
	}
	var cores []*core
	byKey := map[[2]int]*core{}
	for _, c := range cpus {
		key := [2]int{c.pkg, c.core}
		if !c.hasCore {
			key = [2]int{-1, c.id} // unknown topology: a CPU is its own core
		}
		k := byKey[key]
		if k == nil {
			k = &core{pkg: key[0], id: key[1]}
			byKey[key] = k
			cores = append(cores, k)
		}
		k.cpus = append(k.cpus, c.id)
	}
	slices.SortStableFunc(cores, func(a, b *core) int {
		if c := cmp.Compare(a.pkg, b.pkg); c != 0 {
			return c
		}
		return cmp.Compare(a.cpus[0], b.cpus[0])
	})
	groups := make([][]int, n)
	if len(cores) >= n {
		for r := range n {
			for _, k := range cores[r*len(cores)/n : (r+1)*len(cores)/n] {
				groups[r] = append(groups[r], k.cpus...)
			}
		}
	} else {
		var flat []int
		for _, k := range cores {
			flat = append(flat, k.cpus...)
		}
		for r := range n {
			groups[r] = flat[r*len(flat)/n : (r+1)*len(flat)/n]
		}
	}
	for _, g := range groups {
		slices.Sort(g)
	}
	return groups
}

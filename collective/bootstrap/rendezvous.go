package bootstrap

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Open MPI and Slurm start every rank but name no rendezvous address, so a
// program that runs unchanged under torchrun would need MASTER_ADDR and
// MASTER_PORT passed by hand (mpirun -x ...). Where the launcher's own
// variables settle them, the ranks work them out alike instead:
//
//   - the port, from the launcher's job id (Open MPI's
//     OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE; Slurm's SLURM_JOB_ID and
//     SLURM_STEP_ID), in [DerivedPortMin, DerivedPortMin+derivedPorts),
//     below Linux's ephemeral ports; two jobs whose ids map to the same
//     port on one host collide, and the second one's rank 0 cannot listen
//     (set MASTER_PORT then);
//   - the host: loopback when every rank is on this host (Open MPI's local
//     size is the world size; Slurm's step has one node), else, under
//     Slurm, the first node of the step's node list, where Slurm puts task
//     0 (block and cyclic distributions alike). Open MPI across hosts says
//     nowhere where rank 0 runs: MASTER_ADDR is needed there.
//
// An address other than loopback still needs a job token, as any other.

// DerivedPortMin is the lowest port a derived rendezvous uses.
const (
	DerivedPortMin = 20000
	derivedPorts   = 12000
)

// derivedRendezvous returns the host and port the launcher's variables
// settle for a world of size ranks launched by source, "" and 0 where they
// do not, with the variables they came from and, when the host cannot be
// found, what to set.
func derivedRendezvous(get func(string) string, source string, size, localSize int) (host string, port int, from, hint string) {
	var job, jobVars string
	switch source {
	case "openmpi":
		jobVars = "OMPI_MCA_ess_base_jobid"
		if job = get(jobVars); job == "" {
			jobVars = "PMIX_NAMESPACE"
			job = get(jobVars)
		}
		if localSize == size {
			host = "127.0.0.1"
		} else {
			hint = "mpirun across hosts does not say where rank 0 runs: pass its host, mpirun -x MASTER_ADDR=HOST (and a job token, -x VCCL_JOB_TOKEN_FILE)"
		}
	case "slurm":
		if id := get("SLURM_JOB_ID"); id != "" {
			job, jobVars = id+"."+get("SLURM_STEP_ID"), "SLURM_JOB_ID, SLURM_STEP_ID"
		}
		nodes := get("SLURM_STEP_NUM_NODES")
		if nodes == "" {
			nodes = get("SLURM_NNODES")
		}
		list := get("SLURM_STEP_NODELIST")
		if list == "" {
			list = get("SLURM_JOB_NODELIST")
		}
		switch {
		case nodes == "1":
			host = "127.0.0.1"
		case list != "":
			host = firstHost(list)
		}
		if host == "" {
			hint = "Slurm did not say which nodes the step runs on (SLURM_STEP_NODELIST)"
		}
	default:
		return "", 0, "", ""
	}
	if job != "" {
		h := fnv.New32a()
		h.Write([]byte(source + "/" + job))
		port = DerivedPortMin + int(h.Sum32()%derivedPorts)
		from = jobVars
	}
	return host, port, from, hint
}

// firstHost is the first host of a Slurm host list: "node[01-04,07],gpu1"
// gives "node01".
func firstHost(list string) string {
	end := len(list)
	depth := 0
	for i, c := range list {
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == ',' && depth == 0:
			end = i
		}
		if end != len(list) {
			break
		}
	}
	first := strings.TrimSpace(list[:end])
	lb := strings.IndexByte(first, '[')
	if lb < 0 {
		return first
	}
	rb := strings.IndexByte(first[lb:], ']')
	if rb < 0 {
		return ""
	}
	ranges := first[lb+1 : lb+rb]
	lo, _, _ := strings.Cut(ranges, ",")
	lo, _, _ = strings.Cut(lo, "-")
	if _, err := strconv.Atoi(lo); err != nil {
		return ""
	}
	return first[:lb] + lo + first[lb+rb+1:]
}

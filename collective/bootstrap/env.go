package bootstrap

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/vccl-go/vccl/internal/jobauth"
)

// Env is where this process sits in the job, as its launcher described it.
type Env struct {
	Rank      int // 0 ≤ Rank < Size
	Size      int // world size, ≥ 1
	LocalRank int // rank among the processes of this host; -1 if the launcher did not say
	LocalSize int // processes on this host; 0 if the launcher did not say

	MasterAddr string // host of rank 0's rendezvous server; may be empty when Size is 1
	MasterPort int    // its port; 0 when not set and Size is 1

	Token string // VCCL_JOB_TOKEN, or the content of VCCL_JOB_TOKEN_FILE; empty if neither is set

	// Source names the launcher whose variables gave the rank and size:
	// "vccl", "torchrun", "openmpi", "slurm", or "none" when no launcher
	// variable is set (a single process: rank 0 of 1).
	Source string

	// Derived says how the launcher's variables gave the rendezvous
	// address where no MASTER_* variable did (Open MPI, Slurm:
	// rendezvous.go); empty when the variables gave it.
	Derived string
}

// Addr returns MasterAddr:MasterPort, ready for Dial or Serve.
func (e Env) Addr() string {
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort))
}

// launcher names the variables one launcher sets. An empty name means the
// launcher does not set that one.
type launcher struct {
	source                           string
	rank, size, localRank, localSize string
}

// launchers in order of precedence: the first whose rank variable is set
// provides rank, size and the local numbers, so values of two launchers are
// never mixed (torchrun inside a Slurm allocation sees both sets).
var launchers = []launcher{
	{"vccl", "VCCL_RANK", "VCCL_WORLD_SIZE", "VCCL_LOCAL_RANK", "VCCL_LOCAL_WORLD_SIZE"},
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
}

// Variables for the rendezvous address, first set wins. Open MPI and Slurm
// name no rendezvous address; under them the ranks derive what they can
// (rendezvous.go), and these set the rest.
var (
	masterAddrVars = []string{"VCCL_MASTER_ADDR", "MASTER_ADDR"}
	masterPortVars = []string{"VCCL_MASTER_PORT", "MASTER_PORT"}
)

// TokenVar is the environment variable holding the job token, and
// TokenFileVar the one naming a file that holds it.
const (
	TokenVar     = jobauth.TokenVar
	TokenFileVar = jobauth.TokenFileVar
)

// TokenFromEnv returns the job token: VCCL_JOB_TOKEN, or else the first
// line of the file VCCL_JOB_TOKEN_FILE names (blanks around it trimmed), or
// "" when neither is set. Setting both is an error, as is a file that
// cannot be read, an empty one, or a token longer than jobauth.MaxToken.
// The token is never part of an error.
func TokenFromEnv(getenv func(string) string) (string, error) {
	tok := strings.TrimSpace(getenv(TokenVar))
	file := strings.TrimSpace(getenv(TokenFileVar))
	switch {
	case tok != "" && file != "":
		return "", fmt.Errorf("bootstrap: both %s and %s are set: set one", TokenVar, TokenFileVar)
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("bootstrap: %s: %w", TokenFileVar, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, jobauth.MaxToken+2))
		if err != nil {
			return "", fmt.Errorf("bootstrap: %s=%s: %w", TokenFileVar, file, err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		tok = strings.TrimSpace(line)
		if tok == "" {
			return "", fmt.Errorf("bootstrap: %s=%s: the file holds no token", TokenFileVar, file)
		}
	}
	if len(tok) > jobauth.MaxToken {
		return "", fmt.Errorf("bootstrap: the job token is longer than %d bytes", jobauth.MaxToken)
	}
	return tok, nil
}

// FromEnv reads the job layout from the environment through getenv
// (collective.NewFromEnv passes the process's). Rank, world size and the
// local numbers come from the first launcher whose rank variable is set, in
// this order: VCCL_*, torchrun (RANK, …), Open MPI (OMPI_COMM_WORLD_*),
// Slurm (SLURM_PROCID, …).
// The rendezvous address comes from VCCL_MASTER_ADDR/VCCL_MASTER_PORT, else
// MASTER_ADDR/MASTER_PORT, whatever the launcher, else, under Open MPI and
// Slurm, from the launcher's own variables where they settle it
// (rendezvous.go: Derived says how), and is required when the world size
// is above 1. With no launcher variable at all, the process is rank 0 of 1.
func FromEnv(getenv func(string) string) (Env, error) {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	tok, err := TokenFromEnv(getenv)
	if err != nil {
		return Env{}, err
	}
	e := Env{LocalRank: -1, Token: tok}

	var l *launcher
	for i := range launchers {
		if get(launchers[i].rank) != "" {
			l = &launchers[i]
			break
		}
	}
	if l == nil {
		// A size without a rank is a launcher we half understand: say so
		// rather than silently running as a single process.
		for _, cand := range launchers {
			if v := get(cand.size); v != "" {
				return Env{}, fmt.Errorf("bootstrap: %s=%s is set but %s (the rank) is not", cand.size, v, cand.rank)
			}
		}
		e.Rank, e.Size, e.LocalRank, e.LocalSize, e.Source = 0, 1, 0, 1, "none"
	} else {
		e.Source = l.source
		var err error
		if e.Rank, err = intVar(get, l.rank); err != nil {
			return Env{}, err
		}
		sizeStr := get(l.size)
		if sizeStr == "" {
			return Env{}, fmt.Errorf("bootstrap: world size missing: %s=%d is set (%s) but %s is not", l.rank, e.Rank, l.source, l.size)
		}
		if e.Size, err = intVar(get, l.size); err != nil {
			return Env{}, err
		}
		if e.Size < 1 {
			return Env{}, fmt.Errorf("bootstrap: world size %s=%d, must be at least 1", l.size, e.Size)
		}
		if e.Rank < 0 || e.Rank >= e.Size {
			return Env{}, fmt.Errorf("bootstrap: rank %s=%d out of range [0, %d) for %s=%d", l.rank, e.Rank, e.Size, l.size, e.Size)
		}
		if err := e.readLocal(get, l); err != nil {
			return Env{}, err
		}
	}

	addrVar, addr := first(get, masterAddrVars)
	portVar, port := first(get, masterPortVars)
	var hint string
	if e.Size > 1 && (addr == "" || port == "") {
		host, p, from, h := derivedRendezvous(get, e.Source, e.Size, e.LocalSize)
		hint = h
		var derived []string
		if addr == "" && host != "" {
			addr, addrVar = host, e.Source+"'s launch"
			derived = append(derived, "host "+host)
		}
		if port == "" && p != 0 {
			port, portVar = strconv.Itoa(p), from
			derived = append(derived, "port "+port+" from "+from)
		}
		if len(derived) > 0 {
			e.Derived = strings.Join(derived, ", ") + " (" + e.Source + ")"
		}
	}
	e.MasterAddr = addr
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil {
			return Env{}, fmt.Errorf("bootstrap: %s=%q is not a port number", portVar, port)
		}
		if p < 1 || p > 65535 {
			return Env{}, fmt.Errorf("bootstrap: %s=%d out of range [1, 65535]", portVar, p)
		}
		e.MasterPort = p
	}
	if e.Size > 1 {
		if addr == "" {
			if hint != "" {
				hint += "; or "
			}
			return Env{}, fmt.Errorf("bootstrap: master address missing for a world of %d ranks (%s): %sset %s", e.Size, e.Source, hint, strings.Join(masterAddrVars, " or "))
		}
		if port == "" {
			return Env{}, fmt.Errorf("bootstrap: master port missing for a world of %d ranks (%s, %s=%s): set %s", e.Size, e.Source, addrVar, addr, strings.Join(masterPortVars, " or "))
		}
	}
	return e, nil
}

// readLocal fills LocalRank and LocalSize from l's variables where set.
func (e *Env) readLocal(get func(string) string, l *launcher) error {
	if get(l.localRank) != "" {
		v, err := intVar(get, l.localRank)
		if err != nil {
			return err
		}
		if v < 0 || v >= e.Size {
			return fmt.Errorf("bootstrap: local rank %s=%d out of range [0, %d)", l.localRank, v, e.Size)
		}
		e.LocalRank = v
	}
	if s := get(l.localSize); s != "" {
		var v int
		if l.source == "slurm" {
			// SLURM_NTASKS_PER_NODE is "4", "4(x2)" or, with uneven
			// nodes, "2,1": only a uniform count gives this host's.
			n, ok := slurmUniform(s)
			if !ok {
				return nil
			}
			v = n
		} else {
			var err error
			if v, err = intVar(get, l.localSize); err != nil {
				return err
			}
		}
		if v < 1 || v > e.Size {
			return fmt.Errorf("bootstrap: local size %s=%d out of range [1, %d]", l.localSize, v, e.Size)
		}
		e.LocalSize = v
	}
	if e.LocalRank >= 0 && e.LocalSize > 0 && e.LocalRank >= e.LocalSize {
		return fmt.Errorf("bootstrap: local rank %s=%d out of range [0, %d) for %s=%d", l.localRank, e.LocalRank, e.LocalSize, l.localSize, e.LocalSize)
	}
	return nil
}

// slurmUniform parses a Slurm tasks-per-node list ("4", "4(x2)", "4(x2),4")
// and returns the count when every node has the same.
func slurmUniform(s string) (int, bool) {
	n := -1
	for _, part := range strings.Split(s, ",") {
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasSuffix(part, ")") || !strings.HasPrefix(part[i:], "(x") {
				return 0, false
			}
			if _, err := strconv.Atoi(part[i+2 : len(part)-1]); err != nil {
				return 0, false
			}
			part = part[:i]
		}
		v, err := strconv.Atoi(part)
		if err != nil || (n >= 0 && v != n) {
			return 0, false
		}
		n = v
	}
	return n, n >= 0
}

func first(get func(string) string, names []string) (name, value string) {
	for _, n := range names {
		if v := get(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

func intVar(get func(string) string, name string) (int, error) {
	s := get(name)
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bootstrap: %s=%q is not an integer", name, s)
	}
	return v, nil
}

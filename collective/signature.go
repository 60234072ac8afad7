package collective

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// The signature check: before a collective moves data, every rank sends every
// other rank a 32-byte description of the call it made (operation, datatype,
// reduction, algorithm, root, count, sequence number) and compares. Ranks
// that disagree all fail with the same error naming each rank's call, before
// any payload moves, so the communicator stays usable. It costs one small
// all-to-all per call; WithSignatureCheck(false) or VCCL_CHECK=0 turns it off.

const sigSize = 32

// signature encodes the call's description.
func (c *call) signature(dt Datatype, algo Algorithm, seq uint64) [sigSize]byte {
	var b [sigSize]byte
	b[0] = byte(c.op)
	b[1] = byte(dt)
	if c.op.reduces() {
		b[2] = byte(c.redop)
	}
	b[3] = byte(algo)
	root := int32(-1)
	if c.op.rooted() {
		root = int32(c.root)
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(root))
	binary.LittleEndian.PutUint64(b[8:], uint64(c.count))
	binary.LittleEndian.PutUint64(b[16:], seq)
	return b
}

func describeSig(b []byte) string {
	op, dt, red, algo := Op(b[0]), Datatype(b[1]), ReduceOp(b[2]), Algorithm(b[3])
	root := int32(binary.LittleEndian.Uint32(b[4:]))
	count := binary.LittleEndian.Uint64(b[8:])
	seq := binary.LittleEndian.Uint64(b[16:])
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v(count=%d, %v", op, count, dt)
	if red.Valid() {
		fmt.Fprintf(&sb, ", %v", red)
	}
	if root >= 0 {
		fmt.Fprintf(&sb, ", root=%d", root)
	}
	fmt.Fprintf(&sb, ", algo=%v) at seq %d", algo, seq)
	return sb.String()
}

func (o Op) reduces() bool {
	return o == OpAllReduce || o == OpReduceScatter || o == OpReduce
}

func (o Op) rooted() bool {
	return o == OpBroadcast || o == OpReduce || o == OpGather || o == OpScatter
}

// addSignatureExchange puts the exchange and the verify primitive at the head
// of s, which must still be empty, and returns the verify primitive's index.
func addSignatureExchange(s *schedule, rank, n int) int32 {
	var xfers []int32
	for k := 1; k < n; k++ {
		p := mod(rank-k, n)
		xfers = append(xfers, s.recv(p, ref{bufSig, p * sigSize}, sigSize, 0))
	}
	for k := 1; k < n; k++ {
		p := mod(rank+k, n)
		xfers = append(xfers, s.send(p, ref{bufSig, rank * sigSize}, sigSize, 0))
	}
	return s.add(prim{kind: primVerify, deps: xfers})
}

// gateOn makes every primitive after first that has no dependency wait for
// gate.
func gateOn(s *schedule, first int, gate int32) {
	for i := first; i < len(s.prims); i++ {
		if len(s.prims[i].deps) == 0 {
			s.prims[i].deps = []int32{gate}
		}
	}
}

// verify compares the signatures every rank sent.
func (t *task) verify(ranks int) error {
	sigs := t.bufs[bufSig]
	own := sigs[t.call.rank*sigSize : (t.call.rank+1)*sigSize]
	same := true
	for r := range ranks {
		if string(sigs[r*sigSize:(r+1)*sigSize]) != string(own) {
			same = false
			break
		}
	}
	if same {
		return nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "collective: ranks called different collectives:")
	for r := range ranks {
		fmt.Fprintf(&sb, "\n  rank %d: %s", r, describeSig(sigs[r*sigSize:(r+1)*sigSize]))
	}
	return &MismatchError{msg: sb.String()}
}

// MismatchError reports ranks that made different calls at the same point.
type MismatchError struct{ msg string }

func (e *MismatchError) Error() string { return e.msg }

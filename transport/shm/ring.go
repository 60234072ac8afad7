//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The shared segment. The dialler creates it (memfd, sealed against
// resizing) and lays it out; the acceptor checks the layout before it trusts
// a single offset. Side 0 is the dialler, side 1 the acceptor; direction d is
// the data that side d sends.
//
//	0      header: magic, version, ring size, credit slots, segment size, pids
//	512    side 0: state | bell, sleeping | probe address, probe cookie (one line each)
//	1536   side 1: the same
//	4096   direction 0: tail | head | posted | read | single copies done, failed, read rate, ring read rates | sizes[slots] | ring
//	...    direction 1: the same
//	...    mailbox of side 0: sequence | waiting | two slots (mailbox.go)
//	...    mailbox of side 1: the same
//
// Every word one side writes and the other reads sits on its own 128-byte
// line (two 64-byte lines: the adjacent-line prefetcher pairs them).
const (
	segMagic   = 0x314d48534c434356 // "VCCLSHM1", little endian
	segVersion = 9                  // 2: eager sends and the read word; 3: single copy; 4: mailboxes; 5: single-copy read rate; 6: ring read rates; 7: 64 KiB mailbox slots; 8: 256 KiB mailbox slots; 9: the mailbox's tag beside its sequence

	line    = 128
	hdrSize = 4096

	offMagic   = 0
	offVersion = 8
	offRing    = 16
	offSlots   = 24
	offSegSize = 32
	offPid     = 40 // two uint32, one per side

	sideBase   = 512
	sideStride = 1024
	offState   = 0
	offBell    = line
	offSleep   = line + 4
	offProbe   = 2 * line // address and cookie of a word the peer may read (single-copy probe)

	offTail    = 0
	offHead    = line
	offPosted  = 2 * line
	offRead    = 3 * line
	offCMADone = 4 * line // single-copy records the receiver finished
	offCMAFail = 4*line + 8
	offCMARate = 4*line + 16 // the receiver's single-copy read rate (float64 bits, bytes per ns)
	offReadPln = 4*line + 24 // the receiver's read rate out of plainly copied records (the same)
	offReadStr = 4*line + 32 // and out of streamed ones
	offSizes   = 5 * line

	pageSize = 4096
)

// Side states, in the side's state word.
const (
	stateNew      = 0
	stateAttached = 1
	stateClosed   = 2 // left through Close: the peer reads "closed", not "died"
)

// Default geometry. A message moves through its direction's ring in records
// of at most chunkMax payload bytes, so the sender's copy-in of one chunk
// overlaps the receiver's copy-out of the one before.
//
// defaultRing holds four of the collectives' largest pipeline chunks
// (collective.DefaultChunk, 512 KiB): a ring step's chunks in flight, no
// more. A 4 MiB ring (chosen for a transport stream of 1 MiB sends) made a
// 4 MiB all-reduce go once round it per call, every line it wrote last
// touched a call ago and gone from the L2s, and put 8 MiB more of the
// pair's working set on the L3 it shares with the neighbours' VMs; 1 MiB
// (two chunks) slowed 4 MiB all-gathers. See docs/design.md, "shm ring
// size".
const (
	defaultRing  = 2 << 20
	defaultSlots = 1024
	chunkMax     = 64 << 10
	minSplit     = 4 << 10 // a chunk is cut to fit the space left only down to this
	maxRing      = 1 << 30
	maxSlots     = 1 << 20

	// eagerMax is the largest send that goes into the ring before the
	// peer's receive is announced. Such a message is one record (padded
	// to the next lap rather than split) and waits in the ring for its
	// receive, so a small message costs one trip, not a credit's trip and
	// then the data's.
	eagerMax = 16 << 10
)

// Records. A record starts on a 64-byte boundary with a 16-byte header
// (flags, payload length, message length) and its payload; records never
// wrap: the sender pads to the end of the ring instead.
const (
	recHdr   = 16
	recAlign = 64

	fFirst  = 1  // first record of a message (carries the message length)
	fLast   = 2  // last record of a message
	fPad    = 4  // skip to the end of the ring
	fTooBig = 8  // the message does not fit the receive; no payload follows
	fEager  = 16 // sent ahead of its credit: one record, at most eagerMax
	fCMA    = 32 // single copy: the payload is the sender's buffer address; the receiver reads it and acknowledges
	fStream = 64 // the payload went into the ring with non-temporal stores (the receiver times its reads by mode)
)

// creditCMA, in a credit's size word, says the receive takes single copy;
// creditPull says it asks for it (transport.WR.Pull): the sender takes it
// for any message of pullMin bytes or more.
const (
	creditCMA  = 1 << 63
	creditPull = 1 << 62
	creditBits = creditCMA | creditPull
)

func recSize(n int) int { return (recHdr + n + recAlign - 1) &^ (recAlign - 1) }

// geometry is the size of a segment's parts.
type geometry struct {
	ring  int // bytes per direction, power of two
	slots int // credit slots per direction, power of two
}

func (g geometry) ctlSize() int {
	return (offSizes + 8*g.slots + pageSize - 1) &^ (pageSize - 1)
}

func (g geometry) dirBase(d int) int { return hdrSize + d*(g.ctlSize()+g.ring) }

func (g geometry) mailboxBase(side int) int { return g.dirBase(2) + side*mbStride }

func (g geometry) segSize() int { return g.mailboxBase(2) }

func (g geometry) check() error {
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	if !pow2(g.ring) || g.ring < 64<<10 || g.ring > maxRing {
		return fmt.Errorf("ring of %d bytes", g.ring)
	}
	if !pow2(g.slots) || g.slots > maxSlots {
		return fmt.Errorf("%d credit slots", g.slots)
	}
	return nil
}

// sideCtl is one side's words in the header.
type sideCtl struct {
	state    *atomic.Uint32
	bell     *atomic.Uint32 // futex word: bumped to wake the side's waiter
	sleeping *atomic.Uint32 // 1 while the side's waiter sleeps or is about to
	probe    *atomic.Uint64 // address of the side's probe word (single copy)
	cookie   *atomic.Uint64 // the value it holds
}

// dirCtl is one direction: the sender writes tail, read and the ring, the
// receiver writes head, posted, sizes and the single-copy acknowledgements.
type dirCtl struct {
	tail    *atomic.Uint64 // bytes of records published
	head    *atomic.Uint64 // bytes of records consumed
	posted  *atomic.Uint64 // receives the receiver has announced (credits)
	read    *atomic.Uint64 // credits whose sizes the sender has read: their slots may be reused
	cmaDone *atomic.Uint64 // single-copy records the receiver finished
	cmaFail *atomic.Uint64 // of those, the ones it could not read
	cmaRate *atomic.Uint64 // the receiver's recent single-copy reads, bytes per ns (float64 bits; 0: none yet)
	// readRate is the receiver's recent reads out of the ring, bytes per
	// ns (float64 bits; 0: none yet), of plain records ([0]) and of
	// streamed ones ([1]).
	readRate [2]*atomic.Uint64
	sizes    []atomic.Uint64
	ring     []byte
}

// segment is a mapped segment seen from one side.
type segment struct {
	mem      []byte
	geo      geometry
	me, peer sideCtl
	out, in  dirCtl // out: the direction this side sends
}

func u32At(mem []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

func u64At(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

// initSegment lays out a fresh, zeroed segment (dialler).
func initSegment(mem []byte, g geometry, pid int) {
	u64At(mem, offRing).Store(uint64(g.ring))
	u64At(mem, offSlots).Store(uint64(g.slots))
	u64At(mem, offSegSize).Store(uint64(g.segSize()))
	u32At(mem, offVersion).Store(segVersion)
	u32At(mem, offPid).Store(uint32(pid))
	u64At(mem, offMagic).Store(segMagic)
}

// readGeometry checks a mapped segment's header against its size
// (acceptor): a bad header is refused, never trusted.
func readGeometry(mem []byte) (geometry, error) {
	if len(mem) < hdrSize {
		return geometry{}, fmt.Errorf("shm: segment of %d bytes", len(mem))
	}
	if m := u64At(mem, offMagic).Load(); m != segMagic {
		return geometry{}, fmt.Errorf("shm: segment magic %#x", m)
	}
	if v := u32At(mem, offVersion).Load(); v != segVersion {
		return geometry{}, fmt.Errorf("shm: segment version %d, want %d", v, segVersion)
	}
	r, s := u64At(mem, offRing).Load(), u64At(mem, offSlots).Load()
	if r > maxRing || s > maxSlots {
		return geometry{}, fmt.Errorf("shm: segment geometry ring %d slots %d", r, s)
	}
	g := geometry{ring: int(r), slots: int(s)}
	if err := g.check(); err != nil {
		return geometry{}, fmt.Errorf("shm: segment geometry: %v", err)
	}
	if g.segSize() != len(mem) || u64At(mem, offSegSize).Load() != uint64(len(mem)) {
		return geometry{}, fmt.Errorf("shm: segment of %d bytes, layout needs %d", len(mem), g.segSize())
	}
	return g, nil
}

// view builds side's view of a checked segment.
func view(mem []byte, g geometry, side int) *segment {
	s := &segment{mem: mem, geo: g}
	sc := func(i int) sideCtl {
		b := sideBase + i*sideStride
		return sideCtl{
			state: u32At(mem, b+offState), bell: u32At(mem, b+offBell), sleeping: u32At(mem, b+offSleep),
			probe: u64At(mem, b+offProbe), cookie: u64At(mem, b+offProbe+8),
		}
	}
	dc := func(d int) dirCtl {
		b := g.dirBase(d)
		rb := b + g.ctlSize()
		return dirCtl{
			tail: u64At(mem, b+offTail), head: u64At(mem, b+offHead), posted: u64At(mem, b+offPosted),
			read: u64At(mem, b+offRead), cmaDone: u64At(mem, b+offCMADone), cmaFail: u64At(mem, b+offCMAFail), cmaRate: u64At(mem, b+offCMARate),
			readRate: [2]*atomic.Uint64{u64At(mem, b+offReadPln), u64At(mem, b+offReadStr)},
			sizes:    unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[b+offSizes])), g.slots),
			ring:     mem[rb : rb+g.ring : rb+g.ring],
		}
	}
	s.me, s.peer = sc(side), sc(1-side)
	s.out, s.in = dc(side), dc(1-side)
	return s
}

func (s *segment) setPid(side, pid int) { u32At(s.mem, offPid+4*side).Store(uint32(pid)) }

func (s *segment) pid(side int) int { return int(u32At(s.mem, offPid+4*side).Load()) }

// Record header access.

func putRec(ring []byte, pos int, flags uint32, n int, msgLen int) {
	h := ring[pos : pos+recHdr : pos+recHdr]
	binary.LittleEndian.PutUint32(h[0:], flags)
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint64(h[8:], uint64(msgLen))
}

func getRec(ring []byte, pos int) (flags uint32, n int, msgLen uint64) {
	h := ring[pos : pos+recHdr : pos+recHdr]
	return binary.LittleEndian.Uint32(h[0:]), int(binary.LittleEndian.Uint32(h[4:])), binary.LittleEndian.Uint64(h[8:])
}

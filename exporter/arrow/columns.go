package arrow

import (
	"unsafe"

	arrowgo "github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/vccl-go/vccl/flowtel"
)

// colBatch is a batch of records laid out by column, ready to become an
// Arrow record batch without copying.
type colBatch struct {
	n int // rows in use

	ts                                    []int64
	kind, status, op, algo, dtype, pathID []uint8
	channel                               []uint16
	rank, peer                            []int32
	qp, comm                              []uint32
	collSeq, wrID, bytes                  []uint64
	depth, step                           []uint32

	// The derived columns, filled by record in the writer goroutine.
	wall       []int64
	jobOffsets []int32
	jobData    []byte
}

func newColBatch(rows int) *colBatch {
	return &colBatch{
		ts:      make([]int64, rows),
		kind:    make([]uint8, rows),
		status:  make([]uint8, rows),
		op:      make([]uint8, rows),
		algo:    make([]uint8, rows),
		dtype:   make([]uint8, rows),
		pathID:  make([]uint8, rows),
		channel: make([]uint16, rows),
		rank:    make([]int32, rows),
		peer:    make([]int32, rows),
		qp:      make([]uint32, rows),
		comm:    make([]uint32, rows),
		collSeq: make([]uint64, rows),
		wrID:    make([]uint64, rows),
		bytes:   make([]uint64, rows),
		depth:   make([]uint32, rows),
		step:    make([]uint32, rows),

		wall:       make([]int64, rows),
		jobOffsets: make([]int32, rows+1),
		jobData:    make([]byte, rows*8),
	}
}

// append copies as many of recs as fit and returns how many it took.
func (b *colBatch) append(recs []flowtel.Record) int {
	lo := b.n
	k := min(len(recs), len(b.ts)-lo)
	hi := lo + k
	recs = recs[:k]
	// Slicing every column to exactly k first lets the compiler drop the
	// bounds checks in the loop.
	ts, kind, status, op, algo, dtype, pathID := b.ts[lo:hi], b.kind[lo:hi], b.status[lo:hi], b.op[lo:hi], b.algo[lo:hi], b.dtype[lo:hi], b.pathID[lo:hi]
	channel, rank, peer, qp, comm := b.channel[lo:hi], b.rank[lo:hi], b.peer[lo:hi], b.qp[lo:hi], b.comm[lo:hi]
	collSeq, wrID, bytes, depth, step := b.collSeq[lo:hi], b.wrID[lo:hi], b.bytes[lo:hi], b.depth[lo:hi], b.step[lo:hi]
	_, _, _, _, _, _, _ = ts[k-1], kind[k-1], status[k-1], op[k-1], algo[k-1], dtype[k-1], pathID[k-1]
	_, _, _, _, _ = channel[k-1], rank[k-1], peer[k-1], qp[k-1], comm[k-1]
	_, _, _, _, _ = collSeq[k-1], wrID[k-1], bytes[k-1], depth[k-1], step[k-1]
	for i := range recs {
		r := &recs[i]
		ts[i] = r.TsNs
		kind[i] = uint8(r.Kind)
		status[i] = uint8(r.Status)
		op[i] = uint8(r.Op)
		algo[i] = uint8(r.Algo)
		dtype[i] = uint8(r.Dtype)
		pathID[i] = uint8(r.Path)
		channel[i] = r.Channel
		rank[i] = r.Rank
		peer[i] = r.Peer
		qp[i] = r.QP
		comm[i] = r.Comm
		collSeq[i] = r.CollSeq
		wrID[i] = r.WrID
		bytes[i] = r.Bytes
		depth[i] = r.Depth
		step[i] = r.Step
	}
	b.n = hi
	return k
}

// fillDerived computes the wall-clock time and job id of the first n rows.
func (b *colBatch) fillDerived(wallDelta int64) {
	n := b.n
	ts, wall := b.ts[:n], b.wall[:n]
	for i := range ts {
		wall[i] = ts[i] + wallDelta
	}
	offs, data, comm := b.jobOffsets[:n+1], b.jobData[:8*n], b.comm[:n]
	var id [8]byte
	last := uint32(0)
	copy(id[:], flowtel.JobID(last))
	for i, c := range comm {
		if c != last {
			last = c
			copy(id[:], flowtel.JobID(c))
		}
		copy(data[8*i:8*i+8], id[:])
		offs[i] = int32(8 * i)
	}
	offs[n] = int32(8 * n)
}

// full reports whether the batch has no room left.
func (b *colBatch) full() bool { return b.n == len(b.ts) }

// asBytes views the first n elements of s as bytes.
func asBytes[T any](s []T, n int) []byte {
	if n == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), n*int(unsafe.Sizeof(z)))
}

// enumDicts are the dictionaries of the *_name columns: the name of each of
// the 256 codes, as flowtel names it ("" for the code 0 of op and dtype,
// which means none). One array each, shared by every batch, so that the IPC
// writer sees the same dictionary and writes it once per file.
var enumDicts = func() [6]arrowgo.Array {
	names := [6]func(c uint8) string{
		func(c uint8) string { return flowtel.Kind(c).String() },
		func(c uint8) string { return flowtel.Status(c).String() },
		func(c uint8) string {
			if c == 0 {
				return ""
			}
			return flowtel.Op(c).String()
		},
		func(c uint8) string { return flowtel.Algorithm(c).String() },
		func(c uint8) string {
			if c == 0 {
				return ""
			}
			return flowtel.Datatype(c).String()
		},
		func(c uint8) string { return flowtel.Path(c).String() },
	}
	var dicts [6]arrowgo.Array
	for i, name := range names {
		bld := array.NewStringBuilder(memory.DefaultAllocator)
		for c := range 256 {
			bld.Append(name(uint8(c)))
		}
		dicts[i] = bld.NewArray()
		bld.Release()
	}
	return dicts
}()

// record wraps the batch's columns, without copying, in an Arrow record batch
// of schema, after filling the derived columns: wallDelta is what turns
// ts_ns into Unix time. The batch must not change until the record is
// released.
func (b *colBatch) record(schema *arrowgo.Schema, wallDelta int64) arrowgo.RecordBatch {
	n := b.n
	b.fillDerived(wallDelta)
	raw := [nCols][]byte{
		colTs:      asBytes(b.ts, n),
		colKind:    asBytes(b.kind, n),
		colStatus:  asBytes(b.status, n),
		colOp:      asBytes(b.op, n),
		colAlgo:    asBytes(b.algo, n),
		colDtype:   asBytes(b.dtype, n),
		colPath:    asBytes(b.pathID, n),
		colChannel: asBytes(b.channel, n),
		colRank:    asBytes(b.rank, n),
		colPeer:    asBytes(b.peer, n),
		colQP:      asBytes(b.qp, n),
		colComm:    asBytes(b.comm, n),
		colCollSeq: asBytes(b.collSeq, n),
		colWrID:    asBytes(b.wrID, n),
		colBytes:   asBytes(b.bytes, n),
		colDepth:   asBytes(b.depth, n),
		colStep:    asBytes(b.step, n),
	}
	cols := make([]arrowgo.Array, nCols+nDerived)
	for i := range nCols {
		data := array.NewData(columnTypes[i], n, []*memory.Buffer{nil, memory.NewBufferBytes(raw[i])}, nil, 0, 0)
		cols[i] = array.MakeFromData(data)
		data.Release()
	}
	wall := array.NewData(derivedTypes[colTime-nCols], n, []*memory.Buffer{nil, memory.NewBufferBytes(asBytes(b.wall, n))}, nil, 0, 0)
	cols[colTime] = array.MakeFromData(wall)
	wall.Release()
	job := array.NewData(arrowgo.BinaryTypes.String, n,
		[]*memory.Buffer{nil, memory.NewBufferBytes(asBytes(b.jobOffsets, n+1)), memory.NewBufferBytes(b.jobData[:8*n])}, nil, 0, 0)
	cols[colJobID] = array.MakeFromData(job)
	job.Release()
	for i, c := range [6]int{colKind, colStatus, colOp, colAlgo, colDtype, colPath} {
		idx := array.NewData(enumType, n, []*memory.Buffer{nil, memory.NewBufferBytes(raw[c])}, nil, 0, 0)
		idx.SetDictionary(enumDicts[i].Data())
		cols[colKindName+i] = array.MakeFromData(idx)
		idx.Release()
	}
	rec := array.NewRecordBatch(schema, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// batchCols are the validated columns of one Arrow record batch of a trace,
// viewed in place.
type batchCols struct {
	n    int
	cols []arrowgo.Array

	ts                                    []int64
	kind, status, op, algo, dtype, pathID []uint8
	channel                               []uint16
	rank, peer                            []int32
	qp, comm                              []uint32
	collSeq, wrID, bytes                  []uint64
	depth, step                           []uint32
	nulls                                 bool // some column has nulls
}

// columnsOf checks that every column of rb (a trace batch whose columns are
// at idx) holds all its rows, and views them.
func columnsOf(rb arrowgo.RecordBatch, idx *[nCols]int) (*batchCols, error) {
	n := rb.NumRows()
	if n < 0 || n > int64(maxBodyBytes) {
		return nil, errBadBatch("%d rows", n)
	}
	b := &batchCols{n: int(n), cols: make([]arrowgo.Array, nCols)}
	for c := range nCols {
		col := rb.Column(idx[c])
		if int64(col.Len()) != n {
			return nil, errBadBatch("column %q has %d rows, the batch %d", ColumnNames[c], col.Len(), n)
		}
		b.cols[c] = col
	}
	if n == 0 {
		return b, nil
	}
	var err error
	b.ts = values[int64](b.cols[colTs], &err)
	b.kind = values[uint8](b.cols[colKind], &err)
	b.status = values[uint8](b.cols[colStatus], &err)
	b.op = values[uint8](b.cols[colOp], &err)
	b.algo = values[uint8](b.cols[colAlgo], &err)
	b.dtype = values[uint8](b.cols[colDtype], &err)
	b.pathID = values[uint8](b.cols[colPath], &err)
	b.channel = values[uint16](b.cols[colChannel], &err)
	b.rank = values[int32](b.cols[colRank], &err)
	b.peer = values[int32](b.cols[colPeer], &err)
	b.qp = values[uint32](b.cols[colQP], &err)
	b.comm = values[uint32](b.cols[colComm], &err)
	b.collSeq = values[uint64](b.cols[colCollSeq], &err)
	b.wrID = values[uint64](b.cols[colWrID], &err)
	b.bytes = values[uint64](b.cols[colBytes], &err)
	b.depth = values[uint32](b.cols[colDepth], &err)
	b.step = values[uint32](b.cols[colStep], &err)
	if err != nil {
		return nil, err
	}
	for c, col := range b.cols {
		if col.NullN() == 0 {
			continue
		}
		b.nulls = true
		data := col.Data()
		bufs := data.Buffers()
		if len(bufs) < 1 || bufs[0] == nil || bufs[0].Len()*8 < data.Offset()+data.Len() {
			return nil, errBadBatch("the validity bitmap of column %q is too short for %d rows", ColumnNames[c], n)
		}
	}
	return b, nil
}

// records converts rows [lo, hi) into dst (grown as needed) and returns it.
// Null values read as zero.
func (b *batchCols) records(dst []flowtel.Record, lo, hi int) []flowtel.Record {
	k := hi - lo
	if cap(dst) < k {
		dst = make([]flowtel.Record, k)
	}
	dst = dst[:k]
	if k == 0 {
		return dst
	}
	ts, kind, status, op, algo, dtype, pathID := b.ts[lo:hi], b.kind[lo:hi], b.status[lo:hi], b.op[lo:hi], b.algo[lo:hi], b.dtype[lo:hi], b.pathID[lo:hi]
	channel, rank, peer, qp, comm := b.channel[lo:hi], b.rank[lo:hi], b.peer[lo:hi], b.qp[lo:hi], b.comm[lo:hi]
	collSeq, wrID, bytes, depth, step := b.collSeq[lo:hi], b.wrID[lo:hi], b.bytes[lo:hi], b.depth[lo:hi], b.step[lo:hi]
	_, _, _, _, _, _, _ = ts[k-1], kind[k-1], status[k-1], op[k-1], algo[k-1], dtype[k-1], pathID[k-1]
	_, _, _, _, _ = channel[k-1], rank[k-1], peer[k-1], qp[k-1], comm[k-1]
	_, _, _, _, _ = collSeq[k-1], wrID[k-1], bytes[k-1], depth[k-1], step[k-1]
	for i := range dst {
		dst[i] = flowtel.Record{
			TsNs: ts[i], CollSeq: collSeq[i], WrID: wrID[i], Bytes: bytes[i],
			Rank: rank[i], Peer: peer[i], QP: qp[i], Comm: comm[i], Depth: depth[i], Step: step[i],
			Channel: channel[i],
			Kind:    flowtel.Kind(kind[i]), Status: flowtel.Status(status[i]),
			Op: flowtel.Op(op[i]), Algo: flowtel.Algorithm(algo[i]), Dtype: flowtel.Datatype(dtype[i]), Path: flowtel.Path(pathID[i]),
		}
	}
	if b.nulls {
		for c, col := range b.cols {
			if col.NullN() > 0 {
				zeroNulls(dst, col, c, lo)
			}
		}
	}
	return dst
}

type fixed interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

// values returns the values of col, a primitive array of T, after checking
// that its value buffer holds every row; on failure it sets *err (if not yet
// set) and returns nil. A misaligned buffer is copied.
func values[T fixed](col arrowgo.Array, err *error) []T {
	data := col.Data()
	bufs := data.Buffers()
	var z T
	width := int(unsafe.Sizeof(z))
	n, off := data.Len(), data.Offset()
	if len(bufs) < 2 || bufs[1] == nil || off < 0 || bufs[1].Len() < (off+n)*width {
		if *err == nil {
			*err = errBadBatch("the value buffer of a %s column is too short for %d rows", col.DataType(), n)
		}
		return nil
	}
	raw := bufs[1].Bytes()[off*width : (off+n)*width]
	p := unsafe.Pointer(unsafe.SliceData(raw))
	if uintptr(p)%unsafe.Alignof(z) != 0 {
		out := make([]T, n)
		copy(asBytes(out, n), raw)
		return out
	}
	return unsafe.Slice((*T)(p), n)
}

// zeroNulls zeroes field c of the records of dst (rows lo… of col) whose
// value is null.
func zeroNulls(dst []flowtel.Record, col arrowgo.Array, c, lo int) {
	for i := range dst {
		if col.IsValid(lo + i) {
			continue
		}
		r := &dst[i]
		switch c {
		case colTs:
			r.TsNs = 0
		case colKind:
			r.Kind = 0
		case colStatus:
			r.Status = 0
		case colOp:
			r.Op = 0
		case colAlgo:
			r.Algo = 0
		case colDtype:
			r.Dtype = 0
		case colPath:
			r.Path = 0
		case colChannel:
			r.Channel = 0
		case colRank:
			r.Rank = 0
		case colPeer:
			r.Peer = 0
		case colQP:
			r.QP = 0
		case colComm:
			r.Comm = 0
		case colCollSeq:
			r.CollSeq = 0
		case colWrID:
			r.WrID = 0
		case colBytes:
			r.Bytes = 0
		case colDepth:
			r.Depth = 0
		case colStep:
			r.Step = 0
		}
	}
}

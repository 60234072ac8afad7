package arrow

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	arrowgo "github.com/apache/arrow-go/v18/arrow"

	"github.com/vccl-go/vccl/flowtel"
)

// Column names, in the order the writer lays them out: the field names of
// schema v1 (flowtel.Record; the table in docs/design.md).
var ColumnNames = [...]string{
	"ts_ns", "kind", "status", "op", "algo", "dtype", "path", "channel",
	"rank", "peer", "qp", "comm", "coll_seq", "wr_id", "bytes", "depth", "step",
}

const nCols = len(ColumnNames)

// DerivedColumnNames are the columns the writer adds after the v1 columns,
// derived from them, so that SQL and dataframe users need neither the
// metadata nor flowtel: the wall-clock time of ts_ns (timestamp[ns, UTC]),
// the job id as flowtel.JobID prints it, and the name of every enum code
// (dictionary-encoded over all 256 codes, so the index buffer is the code
// column itself). Readers take records from the v1 columns alone, and read
// traces without these columns.
var DerivedColumnNames = [...]string{
	"time", "job_id", "kind_name", "status_name", "op_name", "algo_name", "dtype_name", "path_name",
}

const nDerived = len(DerivedColumnNames)

// Derived column indices, after the v1 columns.
const (
	colTime = nCols + iota
	colJobID
	colKindName
	colStatusName
	colOpName
	colAlgoName
	colDtypeName
	colPathName
)

// enumType is the type of the *_name columns: uint8 codes into a table of
// 256 names.
var enumType = &arrowgo.DictionaryType{IndexType: arrowgo.PrimitiveTypes.Uint8, ValueType: arrowgo.BinaryTypes.String}

var derivedTypes = [nDerived]arrowgo.DataType{
	colTime - nCols:       &arrowgo.TimestampType{Unit: arrowgo.Nanosecond, TimeZone: "UTC"},
	colJobID - nCols:      arrowgo.BinaryTypes.String,
	colKindName - nCols:   enumType,
	colStatusName - nCols: enumType,
	colOpName - nCols:     enumType,
	colAlgoName - nCols:   enumType,
	colDtypeName - nCols:  enumType,
	colPathName - nCols:   enumType,
}

// Column indices into ColumnNames.
const (
	colTs = iota
	colKind
	colStatus
	colOp
	colAlgo
	colDtype
	colPath
	colChannel
	colRank
	colPeer
	colQP
	colComm
	colCollSeq
	colWrID
	colBytes
	colDepth
	colStep
)

// columnTypes are the Arrow types of the columns, matching the Go types of
// flowtel.Record. kind and status are stored as their numeric codes; the
// metadata carries the tables that name them.
var columnTypes = [nCols]arrowgo.DataType{
	colTs:      arrowgo.PrimitiveTypes.Int64,
	colKind:    arrowgo.PrimitiveTypes.Uint8,
	colStatus:  arrowgo.PrimitiveTypes.Uint8,
	colOp:      arrowgo.PrimitiveTypes.Uint8,
	colAlgo:    arrowgo.PrimitiveTypes.Uint8,
	colDtype:   arrowgo.PrimitiveTypes.Uint8,
	colPath:    arrowgo.PrimitiveTypes.Uint8,
	colChannel: arrowgo.PrimitiveTypes.Uint16,
	colRank:    arrowgo.PrimitiveTypes.Int32,
	colPeer:    arrowgo.PrimitiveTypes.Int32,
	colQP:      arrowgo.PrimitiveTypes.Uint32,
	colComm:    arrowgo.PrimitiveTypes.Uint32,
	colCollSeq: arrowgo.PrimitiveTypes.Uint64,
	colWrID:    arrowgo.PrimitiveTypes.Uint64,
	colBytes:   arrowgo.PrimitiveTypes.Uint64,
	colDepth:   arrowgo.PrimitiveTypes.Uint32,
	colStep:    arrowgo.PrimitiveTypes.Uint32,
}

// Schema metadata keys.
const (
	KeySchemaVersion = "vccl.schema_version" // flowtel.SchemaVersion, decimal
	KeyRank          = "vccl.rank"
	KeyWorldSize     = "vccl.world_size"
	KeyCommUID       = "vccl.comm_uid"        // the communicator's full unique id
	KeyCommID        = "vccl.comm_id"         // its 32-bit id, as the comm column holds it, decimal
	KeyJobID         = "vccl.job_id"          // the same id as flowtel.JobID prints it everywhere else
	KeyHost          = "vccl.host"            // host name of the rank
	KeyPID           = "vccl.pid"             // process id of the rank
	KeyClockOffset   = "vccl.clock_offset_ns" // offset of the rank's monotonic clock to rank 0's, added to make ts_ns
	KeyClockError    = "vccl.clock_error_ns"  // uncertainty of that offset
	KeyWallUnixNs    = "vccl.wall_unix_ns"    // a wall-clock time (Unix ns) ...
	KeyWallTsNs      = "vccl.wall_ts_ns"      // ... and ts_ns at the same instant
	KeySegment       = "vccl.segment"         // the file's number in the rank's rotation, from 0
	KeyKindNames     = "vccl.kind_names"      // JSON array: the name of each kind code
	KeyStatusNames   = "vccl.status_names"    // JSON array: the name of each status code
)

// Meta describes the rank a trace comes from. The writer stores it in the
// schema metadata of every file; the reader returns it with each file.
type Meta struct {
	SchemaVersion int    // flowtel.SchemaVersion when written (set by the writer)
	Rank          int    // this rank
	WorldSize     int    // ranks in the communicator
	CommUID       string // the communicator's unique id
	CommID        uint32 // its 32-bit id, as Record.Comm carries it
	Host          string // host name
	PID           int    // process id
	ClockOffsetNs int64  // offset of this rank's clock to rank 0's
	ClockErrorNs  int64  // uncertainty of ClockOffsetNs
	WallUnixNs    int64  // a wall-clock instant (Unix ns) ...
	WallTsNs      int64  // ... and the trace time (ts_ns) at that instant
	Segment       int    // the file's place in the rank's rotation (set by the writer)
	KindNames     []string
	StatusNames   []string
}

// CommInfo is what MetaOf needs of a communicator; *collective.Comm has it.
type CommInfo interface {
	Rank() int
	Size() int
	UID() string
	ID() uint32
	Clock() *flowtel.Clock
}

// MetaOf describes the rank of communicator c running in this process: its
// rank, size, ids, host, pid and clock, with a wall-clock anchor taken now.
func MetaOf(c CommInfo) Meta {
	host, _ := os.Hostname()
	clk := c.Clock()
	m := Meta{
		Rank:          c.Rank(),
		WorldSize:     c.Size(),
		CommUID:       c.UID(),
		CommID:        c.ID(),
		Host:          host,
		PID:           os.Getpid(),
		ClockOffsetNs: clk.Offset(),
		ClockErrorNs:  clk.ErrorNs(),
	}
	m.WallTsNs = clk.Now()
	m.WallUnixNs = time.Now().UnixNano()
	return m
}

// KindName names kind code k with the file's table, falling back to this
// build's names.
func (m *Meta) KindName(k flowtel.Kind) string {
	if int(k) < len(m.KindNames) {
		return m.KindNames[k]
	}
	return k.String()
}

// StatusName names status code s with the file's table, falling back to this
// build's names.
func (m *Meta) StatusName(s flowtel.Status) string {
	if int(s) < len(m.StatusNames) {
		return m.StatusNames[s]
	}
	return s.String()
}

// kindNames and statusNames are this build's tables: every code up to the
// first one flowtel cannot name.
var kindNames, statusNames = func() ([]string, []string) {
	var kinds, statuses []string
	for k := 0; k < 256; k++ {
		n := flowtel.Kind(k).String()
		if n == fmt.Sprintf("kind(%d)", k) {
			break
		}
		kinds = append(kinds, n)
	}
	for s := 0; s < 256; s++ {
		n := flowtel.Status(s).String()
		if n == fmt.Sprintf("status(%d)", s) {
			break
		}
		statuses = append(statuses, n)
	}
	return kinds, statuses
}()

// schemaFor returns the Arrow schema of a file written for m.
func schemaFor(m Meta) *arrowgo.Schema {
	kinds, _ := json.Marshal(kindNames)
	statuses, _ := json.Marshal(statusNames)
	kv := map[string]string{
		KeySchemaVersion: strconv.Itoa(flowtel.SchemaVersion),
		KeyRank:          strconv.Itoa(m.Rank),
		KeyWorldSize:     strconv.Itoa(m.WorldSize),
		KeyCommUID:       m.CommUID,
		KeyCommID:        strconv.FormatUint(uint64(m.CommID), 10),
		KeyJobID:         flowtel.JobID(m.CommID),
		KeyHost:          m.Host,
		KeyPID:           strconv.Itoa(m.PID),
		KeyClockOffset:   strconv.FormatInt(m.ClockOffsetNs, 10),
		KeyClockError:    strconv.FormatInt(m.ClockErrorNs, 10),
		KeyWallUnixNs:    strconv.FormatInt(m.WallUnixNs, 10),
		KeyWallTsNs:      strconv.FormatInt(m.WallTsNs, 10),
		KeySegment:       strconv.Itoa(m.Segment),
		KeyKindNames:     string(kinds),
		KeyStatusNames:   string(statuses),
	}
	md := arrowgo.MetadataFrom(kv)
	fields := make([]arrowgo.Field, 0, nCols+nDerived)
	for i, name := range ColumnNames {
		fields = append(fields, arrowgo.Field{Name: name, Type: columnTypes[i]})
	}
	for i, name := range DerivedColumnNames {
		fields = append(fields, arrowgo.Field{Name: name, Type: derivedTypes[i]})
	}
	return arrowgo.NewSchema(fields, &md)
}

// ErrSchemaVersion is wrapped by the error a reader returns for a trace whose
// schema version it does not know.
var ErrSchemaVersion = fmt.Errorf("unsupported trace schema version (this reader knows version %d)", flowtel.SchemaVersion)

// ErrNotTrace is wrapped by the error a reader returns for input that is not
// a VCCL trace: not Arrow IPC, or Arrow without the trace's metadata and
// columns.
var ErrNotTrace = fmt.Errorf("not a VCCL trace")

// parseSchema checks that s is a schema v1 trace and returns its metadata and
// where each column is.
func parseSchema(s *arrowgo.Schema) (Meta, [nCols]int, error) {
	var m Meta
	var idx [nCols]int
	md := s.Metadata()
	get := func(k string) (string, bool) {
		i := md.FindKey(k)
		if i < 0 {
			return "", false
		}
		return md.Values()[i], true
	}
	v, ok := get(KeySchemaVersion)
	if !ok {
		return m, idx, fmt.Errorf("%w: no %s in the schema metadata", ErrNotTrace, KeySchemaVersion)
	}
	ver, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return m, idx, fmt.Errorf("%w: %s is %q", ErrNotTrace, KeySchemaVersion, v)
	}
	if ver != flowtel.SchemaVersion {
		return m, idx, fmt.Errorf("%w: the trace has version %d", ErrSchemaVersion, ver)
	}
	m.SchemaVersion = ver
	var rank, size, pid, seg, commID int64
	type intKey struct {
		key string
		dst *int64
	}
	ints := []intKey{
		{KeyRank, &rank}, {KeyWorldSize, &size}, {KeyPID, &pid}, {KeySegment, &seg}, {KeyCommID, &commID},
		{KeyClockOffset, &m.ClockOffsetNs}, {KeyClockError, &m.ClockErrorNs},
		{KeyWallUnixNs, &m.WallUnixNs}, {KeyWallTsNs, &m.WallTsNs},
	}
	for _, f := range ints {
		v, ok := get(f.key)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return m, idx, fmt.Errorf("%w: metadata %s is %q, want an integer", ErrNotTrace, f.key, v)
		}
		*f.dst = n
	}
	if commID < 0 || commID > 1<<32-1 {
		return m, idx, fmt.Errorf("%w: metadata %s is %d, want a 32-bit id", ErrNotTrace, KeyCommID, commID)
	}
	m.Rank, m.WorldSize, m.PID, m.Segment, m.CommID = int(rank), int(size), int(pid), int(seg), uint32(commID)
	m.CommUID, _ = get(KeyCommUID)
	m.Host, _ = get(KeyHost)
	for _, t := range []struct {
		key string
		dst *[]string
	}{{KeyKindNames, &m.KindNames}, {KeyStatusNames, &m.StatusNames}} {
		if v, ok := get(t.key); ok {
			if err := json.Unmarshal([]byte(v), t.dst); err != nil {
				return m, idx, fmt.Errorf("%w: metadata %s is not a JSON array of names: %v", ErrNotTrace, t.key, err)
			}
		}
	}
	for c, name := range ColumnNames {
		is := s.FieldIndices(name)
		if len(is) == 0 {
			return m, idx, fmt.Errorf("%w: no column %q", ErrNotTrace, name)
		}
		if len(is) > 1 {
			return m, idx, fmt.Errorf("%w: %d columns named %q", ErrNotTrace, len(is), name)
		}
		if got := s.Field(is[0]).Type; !arrowgo.TypeEqual(got, columnTypes[c]) {
			return m, idx, fmt.Errorf("%w: column %q has type %s, want %s", ErrNotTrace, name, got, columnTypes[c])
		}
		idx[c] = is[0]
	}
	return m, idx, nil
}

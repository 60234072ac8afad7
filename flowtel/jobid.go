package flowtel

import (
	"fmt"
	"strconv"
)

// JobID is the one printed form of a job's id wherever it appears: trace file
// names, the job_id column and metadata of traces, metrics labels, span
// attributes, the analyzer's reports and vccl-top. A job is known by its
// world communicator's 32-bit id (Record.Comm), so the id of a record's
// communicator is JobID(rec.Comm). The form is eight lowercase hexadecimal
// digits, fixed width so that names sort and columns align, and the same
// string a user greps for in file names, dashboards and reports.
func JobID(comm uint32) string {
	const digits = "0123456789abcdef"
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = digits[comm&0xf]
		comm >>= 4
	}
	return string(b[:])
}

// ParseJobID returns the 32-bit id JobID printed as s.
func ParseJobID(s string) (uint32, error) {
	if len(s) != 8 {
		return 0, fmt.Errorf("flowtel: job id %q: want 8 hexadecimal digits", s)
	}
	n, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("flowtel: job id %q: want 8 hexadecimal digits", s)
	}
	return uint32(n), nil
}

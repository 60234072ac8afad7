package ft

import (
	"sync/atomic"
	"time"
)

// Stats counts what a link went through.
type Stats struct {
	Failovers          uint64        // data moved from the primary to the backup
	Failbacks          uint64        // data came back to the primary
	LinkDowns, LinkUps uint64        // paths declared down, paths (re)connected
	RetransmittedWRs   uint64        // messages sent again after a path change
	RetransmittedBytes uint64        // their bytes
	TimeOnBackup       time.Duration // time data spent off the primary (stints that ended)
	OnBackup           bool          // data is off the primary now
	SendsCompleted     uint64        // sends completed without error
	SendsAcked         uint64        // sends the peer acknowledged (a closing peer may not acknowledge the last)
	RecvsDelivered     uint64        // messages delivered to receives
	Duplicates         uint64        // data frames dropped as already delivered (replays the peer had)
}

// Stats returns the link's counters.
func (q *QP) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	if q.backupSince != 0 {
		s.OnBackup = true
		s.TimeOnBackup += time.Duration(nanotime() - q.backupSince)
	}
	return s
}

var totals struct {
	failovers, failbacks, linkDowns, linkUps atomic.Uint64
	retransWRs, retransBytes                 atomic.Uint64
	sendsAcked, recvsDelivered, duplicates   atomic.Uint64
	sendsCompleted                           atomic.Uint64
	backupNs                                 atomic.Int64
}

// Totals returns the counters of every link of this process, live or gone
// (TimeOnBackup counts the stints that ended).
func Totals() Stats {
	return Stats{
		Failovers: totals.failovers.Load(), Failbacks: totals.failbacks.Load(),
		LinkDowns: totals.linkDowns.Load(), LinkUps: totals.linkUps.Load(),
		RetransmittedWRs: totals.retransWRs.Load(), RetransmittedBytes: totals.retransBytes.Load(),
		TimeOnBackup:   time.Duration(totals.backupNs.Load()),
		SendsCompleted: totals.sendsCompleted.Load(),
		SendsAcked:     totals.sendsAcked.Load(), RecvsDelivered: totals.recvsDelivered.Load(),
		Duplicates: totals.duplicates.Load(),
	}
}

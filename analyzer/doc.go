// Package analyzer diagnoses VCCL jobs from their flow telemetry: which
// link, rank or queue pair hurt the job, since when, and the numbers that
// show it.
//
// Offline, AnalyzeFiles reads the Arrow traces of every rank of a job
// (exporter/arrow), merges them on the job's common time base and streams
// them through the detectors: each rank's files are read a record batch at
// a time in a goroutine of their own, and the merge hands the Analyzer the
// records of whichever rank is earliest, so memory stays bounded by what
// happened in the last Options.Slack (plus the collectives still running)
// whatever the length of the trace. An Analyzer can also be fed records
// directly (Add, Advance, Finish). Live, Live runs the link detectors over
// successive flowtel.Window snapshots.
//
// # What the records give
//
// Every link is one direction of a connection, src -> dst on a channel of a
// communicator. A send is in flight from its wr_post on src until it lands:
// the k-th receive completion of dst's queue pair to src completes the k-th
// send of src's queue pair to dst (sends and receives are numbered apart,
// WrID >> 1). Its bytes in flight are the link's backlog; while it waits
// between credit_wait and credit_grant it is credit-starved. When the
// receiver's trace is missing, the sender's own completion ends the flight.
// A send of collective k to a rank that has not begun k yet (its coll_begin
// not seen) is parked: it waits for that rank to arrive, not for the link,
// and is not counted until the rank begins.
//
// Time is cut into slices of Options.Resolution (1ms). For each link and
// slice the analyzer keeps: bytes landed (delivered), busy time (some send
// in flight), wire time (some credited send in flight), credit-starved time
// (busy but not wire), the integral of bytes in flight, and the sender's
// completions. A slice is judged once every rank's records are past it by
// Slack (250ms).
//
// A transfer is timed from when its send could move (posted, credited, and
// the send before it on the connection landed) to its landing: the link's
// bandwidth for that WR is its bytes over that time. WRs under
// SlowLink.MinWRBytes (4KiB; the 32-byte signature check) are not timed.
//
// # A rank that does not run
//
// A rank waiting with a call in flight writes a heartbeat record every 10 ms
// (flowtel.KindHeartbeat); a busy one writes its WRs. So a rank that writes
// heartbeats and wrote nothing at all for Rank.NotRunning (50ms) with a call
// in flight did not run: stopped, frozen, descheduled. Meanwhile its links
// are not judged (their rates say nothing of the network) and the stalls it
// causes are explained. Its silences of at least Rank.MinDown (200ms)
// while most other ranks ran (not a pause of the whole job) are its own;
// when they add up to Rank.Outlier (3) times the longest silence of any
// other rank with a call in flight, however short (the host's own noise),
// and a rank off only once was off for Rank.MinSingle (500ms), they are a
// stall finding of that rank
// (Peer -1), listed together.
//
// A rank whose records stop at least Rank.DeadGrace (10ms) before its
// peers' with a sign of trouble (a call in flight at its end, calls its
// peers began without it, or its peers' transfers with it failing) is a
// dead_rank finding, always critical: when its records stop, and the
// calls it never began. The ranks that stop after it without missing a call
// its peers ran (they exit on the error it caused) are listed in its
// Related, not dead on their own.
//
// # Backpressure
//
// A link is backpressured in a slice when, over the Backpressure.Window
// (5ms) ending at it: sends were in flight at least Backpressure.MinBusy
// (0.5) of the time; the bytes it delivered per busy second fell under
// Backpressure.RateFactor (0.5) times its baseline; at least
// Backpressure.MinBacklog (64KiB) were in flight on average; and either the
// backlog exceeded Backpressure.BacklogFactor (2) times the baseline's mean
// backlog or the link was credit-starved at least Backpressure.CreditShare
// (0.5) of its busy time. The baseline is the link's last Baseline (50ms)
// of slices with sends in flight whose rate had not fallen (a link slowing
// down does not lower its own yardstick); it must cover MinBaseline (5ms)
// of busy time first. Backpressured slices separated by at most MaxGap
// (20ms) form an episode; one flagged for at least MinDuration (100ms), and
// in at least MinShare (0.5) of its busy slices, and at least Outlier (3)
// times the longest episode of any other link at other times (the job's
// own noise), is reported. A link is not judged while its sender or
// receiver does not run, or while its oldest send waits for a rank that has
// not begun its collective. A link's episodes within a second of each
// other, and its other channels', are one finding. (VCCL's rule
// for comparison: bandwidth under half the 50ms mean while the bytes in
// flight exceed twice their 50ms maximum.)
//
// A ring propagates backpressure upstream, so only the root is reported: an
// episode that was credit-starved most of its time while an episode, or a
// slow link, of one of its receiver's own links overlapped it is pushed
// back by that link; the others are roots, and the pushed episodes that
// overlap a root are listed in its Related links. If every overlapping
// episode is pushed (a ring backed up all round), the one whose rate fell
// furthest is the root. The summary says whether the root's data was
// credited and did not land (the link is slow) or waited for credit from a
// receiver that is not itself backed up. Impact: the busy time times the
// share of the baseline rate it lost.
//
// # Head-of-line blocking
//
// On one queue pair, sends complete in order. A send B is blocked when, of
// its latency (post to completion), at least HOL.Dominance (0.8), and at
// least HOL.MinWait (1ms), was spent before the send completed just ahead
// of it did; and the largest send pending ahead of B when B was posted (its
// blocker) is at least HOL.SizeRatio (8) times larger than B or belongs to
// another call (collective or point-to-point operation): a small WR behind
// a large or unrelated one, not a chunk in its own pipeline. Blocking
// events of one queue pair less than HOL.MaxGap (1s) apart form a finding
// of at least HOL.MinBlocked (2) blocked WRs; it names the blocker that held
// WRs up longest (Blocking) and the WRs it held (Blocked). Impact: per
// blocker, the longest wait behind it.
//
// # Straggler
//
// For each collective every rank began, the last rank to arrive is late by
// its coll_begin minus the next latest one's; that lateness counts only as
// far as the rank spent longer outside the library since its previous
// coll_end than the other ranks did (their median), so a rank that merely
// finished the previous call late is not blamed. A collective counts
// against the rank when that is at least Straggler.MinLate (2ms). A rank
// is a straggler when it was late in at least Straggler.MinCount (3)
// collectives, at least Straggler.MinShare (0.5) of all late arrivals in
// the communicator, and at least Straggler.MinFraction (0.05) of its
// collectives, and more often than chance: with L late arrivals in all, the
// chance that a rank is last k of them by luck (one in the number of ranks
// each) must be under Significance (1e-4) over the ranks. A single arrival
// late by Straggler.MinSingleLate (1s) and Straggler.Outlier (5) times
// any other rank's latest (a hang between calls) is a straggler on its
// own. Impact: the sum of its lateness. Ranks whose traces are missing are
// left out of "every rank".
//
// # Slow link
//
// For each collective, each link that moved at least SlowLink.MinBytes
// (64KiB) of timed transfers in at least SlowLink.MinXfer (20µs), and whose
// sender and receiver ran throughout, gets a bandwidth (bytes over transfer
// time) and is compared with the median of the other links of the same
// collective that moved about as much (within 2x): under SlowLink.Ratio
// (0.5) of it, the link was slow in that collective. A run of collectives
// in which the link was slow, ended by more than SlowLink.MaxGap (5) normal
// ones in a row, or by a slow one that would bring it under
// SlowLink.MinFraction (a fault after stray slow collectives starts its own
// run), is reported when at
// least SlowLink.MinCollectives (5) of its collectives, and at least
// SlowLink.MinFraction (0.6) of them, were slow over at least
// SlowLink.MinDuration (250ms: a new connection's first moments are slow),
// and when that many is
// beyond chance: against the rate at which the job's other links were slow,
// the binomial chance of it must be under Significance (1e-4) over the
// links compared. Impact: the transfer time
// beyond what the other links' bandwidth would have taken. A slow link that
// overlaps a worse one in time and shares a rank with it is folded into the
// worse one (listed in Related): both go through that rank, whose interface
// slows both directions and its acknowledgements too. So is a smaller
// backpressure finding on another link through that rank.
//
// # Stall
//
// A link idles inside a collective when, between two slices in which it
// was active (sends posted or completed, in flight, or waiting for credit)
// with the same collective's WRs, nothing was posted, in flight (beyond
// Stall.MaxBusy, 0.1, of a slice) or waiting for at least Stall.MinDuration
// (50ms): the sender had nothing to send, an upstream or compute stall, not
// the network. It is reported unless the sender wrote heartbeats during
// the gap (it waited in the library for its peers: a victim), or its
// receives completed during it (its data came in slowly: the stall is
// upstream), or at least
// Stall.MaxExplained (0.5) of the gap is explained: by some rank not having
// arrived at a collective others began, by a rank not running, or by
// backpressure in the communicator, during the gap; or by a backpressure,
// slow link, straggler or failover finding overlapping it. Of overlapping stalls on one channel, the first to start is the root
// and the others, which ran dry after it, are Related. Impact: the idle
// time.
//
// # Failover
//
// The link records of transport/ft (link_down, failover, link_up,
// failback) of both ends of a connection make one finding per stay on the
// backup path: from the first link_down (or the failover) to the failback
// (or the end of the trace). Throughput before, during and after is bytes
// completed per busy second on the connection: the Failover.Window (1s)
// before the failover, the stay on the backup, and the Window after the
// failback. Impact: the time from link_down to failover, plus the stay
// times the share of throughput lost.
//
// # Live
//
// Live is this analysis run on a sliding window: it keeps the records of
// the last DefaultLiveSpan (2 s; at most DefaultLiveRecords, the newest
// kept) from any number of sources, and each Update merges them in time
// order and runs the detectors above over them, with the same options, so
// that a finding while the job runs means what it means afterwards.
// vccl-top feeds it every rank's records, read from the ranks' live
// endpoints (/v1/records), twice a second.
//
// # Severity, order and the noise floor
//
// Impact over the analysed span of the trace sets Severity: at least
// SeverityCriticalShare (10%) is critical, at least SeverityWarningShare
// (1%) a warning, else info; a dead rank is critical. Findings of severity
// info are the noise floor: a healthy job has them by chance, so they are
// counted (Report.BelowFloor), not listed, unless ListBelowFloor.
// Report.Findings are worst first: severity, impact, start.
//
// # Input
//
// AnalyzeFiles takes files and directories. Files that cannot be read
// (garbage, an unknown schema version, empty) and files of another job than
// the one most ranks belong to are skipped with a warning naming them; a
// file cut short is read up to its last complete batch, with a warning; a
// rank without a trace is named in a warning. It fails only when no trace
// can be read at all, for options out of range, or when its context ends.
package analyzer

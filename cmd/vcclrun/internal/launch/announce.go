package launch

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective"
	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/exporter/live"
	"github.com/vccl-go/vccl/flowtel"
)

// announce says, as soon as the job has them, its job id (when rank 0 has
// made the world communicator) and, when every rank serves its live
// endpoint, where and how to watch it. It reads them from rank 0's
// rendezvous store as an observer, as vccl-top --job does, and gives up
// quietly when the program makes no communicator or serves no endpoints:
// not every program under vcclrun is a VCCL one. It returns when ctx ends.
func announce(ctx context.Context, w io.Writer, addr, token string, n int, dir string) {
	// Dial retries until a VCCL store answers; another program's server
	// on the port (torch's TCPStore, under bench/compare.sh's Gloo runs)
	// would see a hello every half second for the whole job, so the
	// retries end once a VCCL rank 0 would long have served its store.
	dctx, cancel := context.WithTimeout(ctx, announceDialFor)
	st, err := bootstrap.Dial(dctx, addr, token, bootstrap.ObserverRank)
	cancel()
	if err != nil {
		return
	}
	defer st.Close()
	uid, err := st.Get(ctx, bootstrap.UIDKey)
	if err != nil {
		return
	}
	fmt.Fprintf(w, "vcclrun: job %s: %d ranks, rendezvous %s\n", flowtel.JobID(collective.IDOf(string(uid))), n, addr)
	eps, err := live.GatherStore(ctx, st, string(uid), n)
	if err != nil {
		return
	}
	// The store needs the job token, which vcclrun never prints; the
	// endpoints answer on loopback without it.
	watch := "vccl-top --dir " + dir
	if dir == "" {
		urls := make([]string, len(eps))
		for i, e := range eps {
			urls[i] = e.URL
		}
		watch = "vccl-top --targets " + strings.Join(urls, ",")
	}
	fmt.Fprintf(w, "vcclrun: live telemetry at %s (rank 0: /metrics, /v1/info), while the job runs; watch it: %s\n", eps[0].URL, watch)
}

// announceDialFor bounds how long announce waits for rank 0's store: a
// program that takes longer to make its communicator is not announced.
const announceDialFor = time.Minute

// envGetter looks variables up in env as exec would: the last one wins.
func envGetter(env []string) func(string) string {
	return func(key string) string {
		v := ""
		for _, kv := range env {
			if k, val, ok := strings.Cut(kv, "="); ok && k == key {
				v = val
			}
		}
		return v
	}
}

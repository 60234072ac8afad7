package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/vccl-go/vccl/collective/bootstrap"
	"github.com/vccl-go/vccl/exporter/live"
)

// Targets discovers the endpoints given: host:port or URLs, in rank order
// (each rank's /v1/info corrects its number once it answers).
func Targets(targets []string) func(context.Context) (Discovery, error) {
	var eps []Endpoint
	for i, t := range targets {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if !strings.Contains(t, "://") {
			t = "http://" + t
		}
		eps = append(eps, Endpoint{Rank: i, URL: strings.TrimRight(t, "/")})
	}
	return func(context.Context) (Discovery, error) {
		if len(eps) == 0 {
			return Discovery{}, errors.New("no targets")
		}
		return Discovery{Size: len(eps), Endpoints: eps}, nil
	}
}

// Dir discovers the endpoints listed in dir/endpoints.json (written by
// exporter/live), read again while ranks are missing from it.
func Dir(dir string) func(context.Context) (Discovery, error) {
	return func(context.Context) (Discovery, error) {
		eps, err := live.ReadEndpoints(dir)
		if err != nil {
			return Discovery{}, err
		}
		if eps.Size < 0 || eps.Size > MaxRanks || len(eps.Endpoints) > MaxRanks {
			return Discovery{}, fmt.Errorf("%s/%s: %d ranks, %d endpoints: more than vccl-top follows (%d)", dir, live.EndpointsFile, eps.Size, len(eps.Endpoints), MaxRanks)
		}
		d := Discovery{UID: eps.UID, Size: eps.Size}
		for _, e := range eps.Endpoints {
			if checkEndpointURL(e.URL) != nil || e.Rank < 0 || e.Rank >= MaxRanks {
				continue
			}
			d.Endpoints = append(d.Endpoints, Endpoint{Rank: e.Rank, URL: e.URL})
		}
		return d, nil
	}
}

// ObserverRank is the rank number vccl-top presents to the rendezvous
// store: no rank of a job has it.
const ObserverRank = bootstrap.ObserverRank

// Job discovers the endpoints from the job's rendezvous store at addr
// (MASTER_ADDR:MASTER_PORT), presenting the job token: the communicator id
// under vccl/uid, rank 0's endpoint under vccl/UID/live/0, the size from
// rank 0's /v1/info, and the other ranks' endpoints. Ranks that have not
// published yet are left for the next call. The store is hosted by rank
// 0: once the endpoints are known it is no longer needed.
func Job(addr, token string, client *http.Client) func(context.Context) (Discovery, error) {
	if client == nil {
		client = &http.Client{CheckRedirect: noRedirects}
	}
	return func(ctx context.Context) (Discovery, error) {
		st, err := bootstrap.Dial(ctx, addr, token, ObserverRank)
		if err != nil {
			return Discovery{}, err
		}
		defer st.Close()
		get := func(key string, d time.Duration) ([]byte, error) {
			gctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return st.Get(gctx, key)
		}
		b, err := get(bootstrap.UIDKey, 2*time.Second)
		if err != nil {
			return Discovery{}, fmt.Errorf("the job at %s has no communicator yet: %w", addr, err)
		}
		d := Discovery{UID: string(b)}
		ep0, err := get(live.StoreKey(d.UID, 0), 2*time.Second)
		if err != nil {
			return d, fmt.Errorf("rank 0 has published no live endpoint (is VCCL_TELEMETRY_ADDR off?): %w", err)
		}
		var e live.Endpoint
		if err := json.Unmarshal(ep0, &e); err != nil {
			return d, fmt.Errorf("rank 0's endpoint: %w", err)
		}
		if err := checkEndpointURL(e.URL); err != nil {
			return d, fmt.Errorf("rank 0's endpoint in the store: %w", err)
		}
		d.Endpoints = append(d.Endpoints, Endpoint{Rank: 0, URL: e.URL})
		var info live.Info
		if err := getInfo(ctx, client, e.URL, &info); err != nil {
			return d, fmt.Errorf("rank 0's endpoint %s: %w", e.URL, err)
		}
		if err := checkInfo(&info); err != nil {
			return d, fmt.Errorf("rank 0's endpoint %s: %w", e.URL, err)
		}
		d.Size = info.Size
		for r := 1; r < d.Size && ctx.Err() == nil; r++ {
			b, err := get(live.StoreKey(d.UID, r), 200*time.Millisecond)
			if err != nil {
				continue // not published yet: the next call
			}
			var e live.Endpoint
			if json.Unmarshal(b, &e) == nil && checkEndpointURL(e.URL) == nil {
				d.Endpoints = append(d.Endpoints, Endpoint{Rank: r, URL: e.URL})
			}
		}
		return d, nil
	}
}

func getInfo(ctx context.Context, client *http.Client, url string, info *live.Info) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/v1/info", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return decodeBounded(resp.Body, maxInfoBytes, info)
}

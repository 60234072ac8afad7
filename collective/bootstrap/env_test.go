package bootstrap

import (
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	master := map[string]string{"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		env     map[string]string
		want    Env
		wantErr string // substring; "" means success
	}{
		{
			name: "nothing set: one process",
			env:  map[string]string{},
			want: Env{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Source: "none"},
		},
		{
			name: "torchrun",
			env:  with(master, "RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "VCCL_JOB_TOKEN", "tok"),
			want: Env{Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, MasterAddr: "10.0.0.1", MasterPort: 29500, Token: "tok", Source: "torchrun"},
		},
		{
			name: "vccl wins over torchrun and its address over MASTER_*",
			env: with(master, "RANK", "3", "WORLD_SIZE", "8", "VCCL_RANK", "1", "VCCL_WORLD_SIZE", "2",
				"VCCL_MASTER_ADDR", "node0", "VCCL_MASTER_PORT", "1234"),
			want: Env{Rank: 1, Size: 2, LocalRank: -1, MasterAddr: "node0", MasterPort: 1234, Source: "vccl"},
		},
		{
			name: "vccl local variables",
			env:  with(master, "VCCL_RANK", "5", "VCCL_WORLD_SIZE", "6", "VCCL_LOCAL_RANK", "2", "VCCL_LOCAL_WORLD_SIZE", "3"),
			want: Env{Rank: 5, Size: 6, LocalRank: 2, LocalSize: 3, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "vccl"},
		},
		{
			name: "torchrun inside slurm: torchrun wins, values not mixed",
			env:  with(master, "RANK", "0", "WORLD_SIZE", "2", "SLURM_PROCID", "7", "SLURM_NTASKS", "16", "SLURM_LOCALID", "3"),
			want: Env{Rank: 0, Size: 2, LocalRank: -1, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "torchrun"},
		},
		{
			name: "open mpi",
			env: with(master, "OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "8",
				"OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "4", "SLURM_PROCID", "1", "SLURM_NTASKS", "2"),
			want: Env{Rank: 6, Size: 8, LocalRank: 2, LocalSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "openmpi"},
		},
		{
			name: "slurm uniform tasks per node",
			env:  with(master, "SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1", "SLURM_NTASKS_PER_NODE", "4(x2)"),
			want: Env{Rank: 5, Size: 8, LocalRank: 1, LocalSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "slurm"},
		},
		{
			name: "slurm plain tasks per node",
			env:  with(master, "SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "4"),
			want: Env{Rank: 0, Size: 4, LocalRank: 0, LocalSize: 4, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "slurm"},
		},
		{
			name: "slurm uneven tasks per node: local size unknown",
			env:  with(master, "SLURM_PROCID", "2", "SLURM_NTASKS", "3", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "2,1"),
			want: Env{Rank: 2, Size: 3, LocalRank: 0, LocalSize: 0, MasterAddr: "10.0.0.1", MasterPort: 29500, Source: "slurm"},
		},
		{
			name: "single rank needs no master",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			want: Env{Rank: 0, Size: 1, LocalRank: -1, Source: "torchrun"},
		},
		{
			name: "whitespace trimmed, ipv6 master",
			env:  map[string]string{"RANK": " 1 ", "WORLD_SIZE": "2\n", "MASTER_ADDR": "::1", "MASTER_PORT": "80"},
			want: Env{Rank: 1, Size: 2, LocalRank: -1, MasterAddr: "::1", MasterPort: 80, Source: "torchrun"},
		},
		{name: "rank too large", env: with(master, "RANK", "8", "WORLD_SIZE", "8"), wantErr: "rank RANK=8 out of range [0, 8)"},
		{name: "negative rank", env: with(master, "VCCL_RANK", "-1", "VCCL_WORLD_SIZE", "8"), wantErr: "rank VCCL_RANK=-1 out of range"},
		{name: "non-numeric rank", env: with(master, "RANK", "zero", "WORLD_SIZE", "8"), wantErr: `RANK="zero" is not an integer`},
		{name: "non-numeric size", env: with(master, "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4x"), wantErr: `OMPI_COMM_WORLD_SIZE="4x" is not an integer`},
		{name: "non-numeric local rank", env: with(master, "RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "a"), wantErr: `LOCAL_RANK="a" is not an integer`},
		{name: "non-numeric port", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, wantErr: `MASTER_PORT="http" is not a port number`},
		{name: "port out of range", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, wantErr: "MASTER_PORT=70000 out of range"},
		{name: "size missing", env: with(master, "RANK", "0"), wantErr: "world size missing: RANK=0 is set (torchrun) but WORLD_SIZE is not"},
		{name: "size zero", env: with(master, "RANK", "0", "WORLD_SIZE", "0"), wantErr: "must be at least 1"},
		{name: "size without rank", env: with(master, "WORLD_SIZE", "4"), wantErr: "WORLD_SIZE=4 is set but RANK (the rank) is not"},
		{name: "master address missing", env: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, wantErr: "master address missing for a world of 2 ranks (torchrun): set VCCL_MASTER_ADDR or MASTER_ADDR"},
		{name: "master port missing", env: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "MASTER_ADDR": "h"}, wantErr: "master port missing"},
		{
			name: "open mpi on one host: loopback and a port from the job id",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_MCA_ess_base_jobid": "854851585", "PMIX_NAMESPACE": "854851585"},
			want: Env{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 25851, Source: "openmpi",
				Derived: "host 127.0.0.1, port 25851 from OMPI_MCA_ess_base_jobid (openmpi)"},
		},
		{
			name: "open mpi 5 names its job in PMIX_NAMESPACE",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
				"PMIX_NAMESPACE": "prterun-vm-1234@1"},
			want: Env{Rank: 0, Size: 2, LocalRank: -1, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: 24492, Source: "openmpi",
				Derived: "host 127.0.0.1, port 24492 from PMIX_NAMESPACE (openmpi)"},
		},
		{
			name: "open mpi across hosts with MASTER_ADDR: the port from the job id",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
				"OMPI_MCA_ess_base_jobid": "854851585", "MASTER_ADDR": "node0"},
			want: Env{Rank: 3, Size: 4, LocalRank: -1, LocalSize: 2, MasterAddr: "node0", MasterPort: 25851, Source: "openmpi",
				Derived: "port 25851 from OMPI_MCA_ess_base_jobid (openmpi)"},
		},
		{
			name: "open mpi across hosts: where rank 0 runs is unknown",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
				"OMPI_MCA_ess_base_jobid": "854851585"},
			wantErr: "master address missing for a world of 4 ranks (openmpi): mpirun across hosts does not say where rank 0 runs: pass its host, mpirun -x MASTER_ADDR=HOST",
		},
		{
			name: "slurm step on one node",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0",
				"SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "vm"},
			want: Env{Rank: 1, Size: 2, LocalRank: -1, MasterAddr: "127.0.0.1", MasterPort: 20877, Source: "slurm",
				Derived: "host 127.0.0.1, port 20877 from SLURM_JOB_ID, SLURM_STEP_ID (slurm)"},
		},
		{
			name: "slurm step on several nodes: the first node of the list",
			env: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0",
				"SLURM_STEP_NUM_NODES": "3", "SLURM_STEP_NODELIST": "gpu[07-08],cpu1"},
			want: Env{Rank: 5, Size: 6, LocalRank: -1, MasterAddr: "gpu07", MasterPort: 20877, Source: "slurm",
				Derived: "host gpu07, port 20877 from SLURM_JOB_ID, SLURM_STEP_ID (slurm)"},
		},
		{name: "local rank beyond local size", env: with(master, "RANK", "0", "WORLD_SIZE", "8", "LOCAL_RANK", "4", "LOCAL_WORLD_SIZE", "4"), wantErr: "local rank LOCAL_RANK=4 out of range [0, 4)"},
		{name: "local size beyond size", env: with(master, "RANK", "0", "WORLD_SIZE", "2", "LOCAL_WORLD_SIZE", "4"), wantErr: "local size LOCAL_WORLD_SIZE=4 out of range [1, 2]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestEnvAddr(t *testing.T) {
	if a := (Env{MasterAddr: "::1", MasterPort: 80}).Addr(); a != "[::1]:80" {
		t.Fatalf("Addr = %q", a)
	}
}

func TestSlurmUniform(t *testing.T) {
	for in, want := range map[string]int{"4": 4, "4(x2)": 4, "4(x2),4": 4, "2,1": -1, "": -1, "4(x)": -1, "4(2)": -1, "x": -1, "4(x2),2(x1)": -1} {
		n, ok := slurmUniform(in)
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("slurmUniform(%q) = %d, want %d", in, n, want)
		}
	}
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"node1": "node1", "node1,node2": "node1", "node[01-04,07]": "node01", "gpu[3,5]-ib,cpu1": "gpu3-ib",
		"a[1-2],b[3-4]": "a1", "n[x-y]": "", "n[1": "",
	} {
		if got := firstHost(in); got != want {
			t.Errorf("firstHost(%q) = %q, want %q", in, got, want)
		}
	}
}

package launch

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		args    []string
		want    Config
		wantErr string
	}{
		{args: []string{"-n", "4", "prog"}, want: Config{N: 4, Grace: 5 * time.Second, TagOutput: TagOutputAuto, Bind: BindCore, Announce: true, Prog: "prog", Args: []string{}}},
		{args: []string{"-n", "4", "--tag-output", "prog"}, want: Config{N: 4, Grace: 5 * time.Second, TagOutput: TagOutputAll, Bind: BindCore, Announce: true, Prog: "prog", Args: []string{}}},
		{args: []string{"-n", "4", "--tag-output=auto", "prog"}, want: Config{N: 4, Grace: 5 * time.Second, TagOutput: TagOutputAuto, Bind: BindCore, Announce: true, Prog: "prog", Args: []string{}}},
		{args: []string{"-n", "4", "--tag-output=rank0", "prog"}, wantErr: `invalid boolean value "rank0" for -tag-output: want auto, true or false`},
		{args: []string{"-n=2", "--grace", "1s", "--timeout=1m", "--tag-output=false", "--bind-to", "none", "--", "prog", "-n", "9", "--x"},
			want: Config{N: 2, Grace: time.Second, Timeout: time.Minute, TagOutput: TagOutputNone, Bind: BindNone, Announce: true, Prog: "prog", Args: []string{"-n", "9", "--x"}}},
		{args: []string{"-n", "1", "prog", "--", "a"}, want: Config{N: 1, Grace: 5 * time.Second, TagOutput: TagOutputAuto, Bind: BindCore, Announce: true, Prog: "prog", Args: []string{"--", "a"}}},
		{args: []string{"-n", "1", "--quiet", "prog"}, want: Config{N: 1, Grace: 5 * time.Second, TagOutput: TagOutputAuto, Bind: BindCore, Prog: "prog", Args: []string{}}},
		{args: []string{"-n", "2", "--bind-to", "socket", "p"}, wantErr: `--bind-to "socket": want core or none`},
		{args: []string{"prog"}, wantErr: "-n is required"},
		{args: []string{"-n", "0", "prog"}, wantErr: "-n 0: need at least one rank"},
		{args: []string{"-n", "four", "prog"}, wantErr: `invalid value "four" for flag -n`},
		{args: []string{"-n", "2"}, wantErr: "no program given"},
		{args: []string{"-n", "2", "--"}, wantErr: "no program given"},
		{args: []string{"-n", "2", "--grace", "-1s", "p"}, wantErr: "--grace -1s: must not be negative"},
		{args: []string{"-n", "2", "--grace", "5", "p"}, wantErr: `invalid value "5" for flag -grace`},
		{args: []string{"-n", "2", "--timeout", "-1s", "p"}, wantErr: "--timeout -1s: must not be negative"},
		{args: []string{"-n", "2", "--bogus", "p"}, wantErr: "flag provided but not defined: -bogus"},
	}
	for _, c := range cases {
		got, err := ParseArgs(c.args)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseArgs(%q): err = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseArgs(%q): %v", c.args, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseArgs(%q)\n got %+v\nwant %+v", c.args, got, c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"-h"}, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("-h: status %d", code)
	}
	for _, want := range []string{"usage: vcclrun -n N", "-grace", "-timeout", "-tag-output", "-bind-to", "-quiet"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestJobEnv(t *testing.T) {
	base, token, file := jobEnv([]string{"HOME=/h", "RANK=3", "VCCL_RANK=1", "VCCL_MASTER_ADDR=x", "VCCL_JOB_TOKEN=a", "VCCL_JOB_TOKEN=b", "VCCL_OTHER=1", "MASTER_PORT=2", "VCCL_JOB_TOKEN_FILE=/t"})
	if want := []string{"HOME=/h", "VCCL_OTHER=1"}; !reflect.DeepEqual(base, want) || token != "b" || file {
		t.Fatalf("jobEnv = %q, %q, %v", base, token, file)
	}
	// A token file alone is passed on, and vcclrun makes no token.
	base, token, file = jobEnv([]string{"HOME=/h", "VCCL_JOB_TOKEN_FILE=/run/secrets/vccl"})
	if want := []string{"HOME=/h", "VCCL_JOB_TOKEN_FILE=/run/secrets/vccl"}; !reflect.DeepEqual(base, want) || token != "" || !file {
		t.Fatalf("jobEnv with a token file = %q, %q, %v", base, token, file)
	}
}

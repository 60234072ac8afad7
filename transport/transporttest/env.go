package transporttest

import (
	"strings"
	"testing"
)

// EnvCase is a row of a table test of a backend's configuration parser,
// which reads its variables through a lookup function.
type EnvCase[T comparable] struct {
	Name    string
	Env     map[string]string // the variables set; any other reads as ""
	Want    T
	WantErr string // when set, the error must contain it: usually the variable's name
}

// RunEnvCases runs each case as a parallel subtest of t: parse, reading the
// case's Env, returns Want, or an error containing WantErr.
func RunEnvCases[T comparable](t *testing.T, what string, parse func(getenv func(string) string) (T, error), cases []EnvCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			got, err := parse(func(k string) string { return tc.Env[k] })
			if tc.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
					t.Fatalf("%s: %v, want an error naming %s", what, err, tc.WantErr)
				}
				return
			}
			if err != nil || got != tc.Want {
				t.Fatalf("%s = %+v, %v; want %+v", what, got, err, tc.Want)
			}
		})
	}
}

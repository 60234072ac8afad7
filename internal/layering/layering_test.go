package layering

import (
	"os/exec"
	"strings"
	"testing"
)

// heavy are the import path fragments the comm library must never reach.
var heavy = []string{
	"go.opentelemetry.io/",
	"github.com/prometheus/",
	"github.com/apache/arrow",
	"charm.land/",
	"github.com/charmbracelet/",
	"github.com/NVIDIA/go-nvml",
}

// ours are this module's packages the comm library must not import.
var ours = []string{
	"github.com/vccl-go/vccl/exporter",
	"github.com/vccl-go/vccl/telemetry",
	"github.com/vccl-go/vccl/analyzer",
	"github.com/vccl-go/vccl/ui",
	"github.com/vccl-go/vccl/cmd",
	"github.com/vccl-go/vccl/capi", // libnccl.so.2's logic sits on the comm library, never under it
	"github.com/vccl-go/vccl/gpu/",
}

func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

func TestCommLibraryStaysLight(t *testing.T) {
	for _, dep := range deps(t, "github.com/vccl-go/vccl/collective/...", "github.com/vccl-go/vccl/transport/...", "github.com/vccl-go/vccl/flowtel/...") {
		for _, bad := range append(heavy, ours...) {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("the comm library depends on %s; keep exporters, UI and NVML out of collective, transport and flowtel", dep)
			}
		}
	}
}

func TestFlowtelImportsNothingOfOurs(t *testing.T) {
	for _, dep := range deps(t, "github.com/vccl-go/vccl/flowtel") {
		if strings.HasPrefix(dep, "github.com/vccl-go/vccl/") && dep != "github.com/vccl-go/vccl/flowtel" {
			t.Errorf("flowtel imports %s; it must import no other package of this module", dep)
		}
	}
}

func TestTransportDoesNotKnowCollectives(t *testing.T) {
	for _, dep := range deps(t, "github.com/vccl-go/vccl/transport/...") {
		if strings.HasPrefix(dep, "github.com/vccl-go/vccl/collective") {
			t.Errorf("transport imports %s; transports must not know about collectives", dep)
		}
	}
}

// The telemetry consumers take the record's vocabulary and its fold from
// flowtel: a program that reads traces or metrics links no transport and no
// collective code. The rendezvous store's client (collective/bootstrap, a
// leaf over flowtel) is how the live endpoint announces itself and vccl-top
// finds it, so it is allowed.
func TestConsumersImportOnlyFlowtel(t *testing.T) {
	consumers := []string{"github.com/vccl-go/vccl/exporter/...", "github.com/vccl-go/vccl/analyzer", "github.com/vccl-go/vccl/ui/..."}
	for _, dep := range deps(t, consumers...) {
		if dep == "github.com/vccl-go/vccl/collective/bootstrap" {
			continue
		}
		if strings.HasPrefix(dep, "github.com/vccl-go/vccl/collective") || strings.HasPrefix(dep, "github.com/vccl-go/vccl/transport") {
			t.Errorf("a telemetry consumer (exporter, analyzer or ui) depends on %s; take the vocabulary and the fold from flowtel", dep)
		}
	}
}

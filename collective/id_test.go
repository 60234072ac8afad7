package collective

import "testing"

func TestIDOf(t *testing.T) {
	comms := newLocal(t, 1)
	if got := IDOf(comms[0].UID()); got != comms[0].ID() {
		t.Errorf("IDOf(%q) = %08x, want the communicator's id %08x", comms[0].UID(), got, comms[0].ID())
	}
}

package ce

import (
	"testing"
)

// An export published through one mapping of the mailbox is read through
// another; a slot reused by a later export no longer answers for the old
// id; ranks' tables and state words do not overlap the pair boxes.
func TestExportTable(t *testing.T) {
	m, err := createMailbox(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	o, err := openMailbox(m.path, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	var h [64]byte
	for i := range h {
		h[i] = byte(i + 1)
	}
	id := uint64(exportBase + 7)
	m.export(2, id, 4096, 0x7f0000, 1234, h)
	size, base, pid, got, ok := o.exported(2, id)
	if !ok || size != 4096 || base != 0x7f0000 || pid != 1234 || got != h {
		t.Fatalf("exported(2, %d) = %d %#x %d %v %v", id, size, base, pid, got[:4], ok)
	}
	if _, _, _, _, ok := o.exported(1, id); ok {
		t.Error("rank 1's table answers for rank 2's export")
	}
	later := id + exportSlots
	m.export(2, later, 8192, 0x8f0000, 1234, h)
	if _, _, _, _, ok := o.exported(2, id); ok {
		t.Error("a reused slot still answers for the old id")
	}
	if size, _, _, _, ok := o.exported(2, later); !ok || size != 8192 {
		t.Errorf("the new export: %d %v", size, ok)
	}
	// State words and pair boxes are independent.
	for q := 0; q < 3; q++ {
		atomicStore(m.state(q), stateClosed)
	}
	atomicStore(&m.pair(2, 2).done, 99)
	for q := 0; q < 3; q++ {
		if atomicLoad(o.state(q)) != stateClosed {
			t.Errorf("rank %d's state not seen", q)
		}
	}
	if atomicLoad(&o.pair(2, 2).done) != 99 {
		t.Error("pair box clobbered")
	}
	if _, _, _, _, ok := o.exported(2, later); !ok {
		t.Error("export clobbered by the state words")
	}
}

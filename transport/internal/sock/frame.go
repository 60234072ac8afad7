package sock

import "fmt"

// PrefixSize is the length of the prefix every frame header starts with:
// magic, version, type and flags, one byte each.
const PrefixSize = 4

// PutPrefix writes a frame header's prefix into b.
func PutPrefix(b []byte, magic, version, typ, flags uint8) {
	_ = b[PrefixSize-1]
	b[0], b[1], b[2], b[3] = magic, version, typ, flags
}

// CheckPrefix checks that b holds a whole header of size bytes with the
// magic and version given; its error wraps bad, the backend's malformed
// frame error.
func CheckPrefix(b []byte, size int, magic, version uint8, bad error) error {
	switch {
	case len(b) < size:
		return fmt.Errorf("%w: %d bytes, want %d", bad, len(b), size)
	case b[0] != magic:
		return fmt.Errorf("%w: magic %#02x, want %#02x", bad, b[0], magic)
	case b[1] != version:
		return fmt.Errorf("%w: version %d, want %d", bad, b[1], version)
	}
	return nil
}

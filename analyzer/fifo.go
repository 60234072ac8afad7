package analyzer

// fifo is a queue that grows by doubling.
type fifo[T any] struct {
	buf  []T
	head int
	n    int
}

// push appends v, growing the queue as needed; callers bound it (see
// bounded).
func (f *fifo[T]) push(v T) {
	if f.n == len(f.buf) {
		f.grow(max(2*len(f.buf), 8))
	}
	i := f.head + f.n
	if i >= len(f.buf) {
		i -= len(f.buf)
	}
	f.buf[i] = v
	f.n++
}

// pushBounded appends v after dropping the oldest elements beyond bound-1.
func (f *fifo[T]) pushBounded(v T, bound int) {
	for f.n >= bound {
		f.popFront()
	}
	f.push(v)
}

// grow is called on a full queue only.
func (f *fifo[T]) grow(c int) {
	buf := make([]T, c)
	k := copy(buf, f.buf[f.head:])
	copy(buf[k:], f.buf[:f.head])
	f.buf, f.head = buf, 0
}

func (f *fifo[T]) front() *T { return &f.buf[f.head] }

func (f *fifo[T]) popFront() T {
	v := f.buf[f.head]
	var zero T
	f.buf[f.head] = zero
	f.head++
	if f.head == len(f.buf) {
		f.head = 0
	}
	f.n--
	return v
}

// at returns the i-th oldest element.
func (f *fifo[T]) at(i int) *T {
	j := f.head + i
	if j >= len(f.buf) {
		j -= len(f.buf)
	}
	return &f.buf[j]
}

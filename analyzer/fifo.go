package analyzer

// fifo is a queue that grows by doubling up to a bound; pushing onto a full
// queue at its bound drops (and returns) the oldest element.
type fifo[T any] struct {
	buf  []T
	head int
	n    int
}

func (f *fifo[T]) len() int { return f.n }

// push appends v; when the queue already holds bound elements it drops the
// oldest first and returns it with true.
func (f *fifo[T]) push(v T, bound int) (dropped T, ok bool) {
	if f.n == len(f.buf) {
		if len(f.buf) < bound {
			f.grow(min(max(2*len(f.buf), 8), bound))
		} else {
			dropped, ok = f.popFront(), true
		}
	}
	i := f.head + f.n
	if i >= len(f.buf) {
		i -= len(f.buf)
	}
	f.buf[i] = v
	f.n++
	return dropped, ok
}

// grow is called on a full queue only.
func (f *fifo[T]) grow(c int) {
	buf := make([]T, c)
	k := copy(buf, f.buf[f.head:])
	copy(buf[k:], f.buf[:f.head])
	f.buf, f.head = buf, 0
}

func (f *fifo[T]) front() *T { return &f.buf[f.head] }

func (f *fifo[T]) back() *T { return f.at(f.n - 1) }

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

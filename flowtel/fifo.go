package flowtel

// FIFO is a first-in first-out queue on a ring that grows by doubling, so
// that a queue in steady use stops allocating. Its zero value is empty and
// ready. The fold keeps its pending posts and open calls in FIFOs; the
// transports their posted WRs and credits, the analyzer its per-link
// history. It lives here because flowtel imports no other package of this
// module and every one of those already imports flowtel.
//
// A pointer returned by Front, Back, At or PushSlot stays valid until the
// next push; removal does not move elements.
type FIFO[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int
}

// Len returns the number of elements.
func (q *FIFO[T]) Len() int { return q.n }

// Push appends v.
func (q *FIFO[T]) Push(v T) { *q.PushSlot() = v }

// PushSlot appends an element and returns it to be filled in place; it
// holds whatever the slot last held (a zero value unless Drop left one), so
// the caller sets every field it reads later.
func (q *FIFO[T]) PushSlot() *T {
	if q.n == len(q.buf) {
		q.grow(max(2*len(q.buf), 8))
	}
	q.n++
	return q.At(q.n - 1)
}

// PushBounded appends v, first removing the oldest elements so that the
// queue holds at most bound (at least 1); its storage never exceeds bound.
func (q *FIFO[T]) PushBounded(v T, bound int) {
	if q.n == bound && q.n == len(q.buf) {
		// Full at the bound: the slot Drop frees is the one Push fills.
		q.Drop()
	}
	for q.n >= bound {
		q.PopFront()
	}
	if q.n == len(q.buf) {
		q.grow(min(max(2*len(q.buf), 8), bound))
	}
	q.Push(v)
}

// grow is called on a full queue only.
func (q *FIFO[T]) grow(c int) {
	buf := make([]T, c)
	k := copy(buf, q.buf[q.head:])
	copy(buf[k:], q.buf[:q.head])
	q.buf, q.head = buf, 0
}

// At returns the i-th oldest element (0 is the front).
func (q *FIFO[T]) At(i int) *T {
	j := q.head + i
	if j >= len(q.buf) {
		j -= len(q.buf)
	}
	return &q.buf[j]
}

// Front returns the oldest element.
func (q *FIFO[T]) Front() *T { return &q.buf[q.head] }

// Back returns the newest element.
func (q *FIFO[T]) Back() *T { return q.At(q.n - 1) }

// PopFront removes and returns the oldest element, clearing its slot so the
// queue keeps nothing it no longer holds reachable (a buffer, a pointer).
func (q *FIFO[T]) PopFront() T {
	p := &q.buf[q.head]
	v := *p
	var zero T
	*p = zero
	q.Drop()
	return v
}

// Drop removes the oldest element without clearing its slot: a pointer
// from Front stays readable until the next push, so a caller may look at an
// element in place after removing it.
func (q *FIFO[T]) Drop() {
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
}

// PopBack removes and returns the newest element, clearing its slot.
func (q *FIFO[T]) PopBack() T {
	p := q.Back()
	v := *p
	var zero T
	*p = zero
	q.n--
	return v
}

//go:build !amd64 || purego

package collective

// No assembly kernels: reduceInto runs the pure-Go loops in reduce.go.

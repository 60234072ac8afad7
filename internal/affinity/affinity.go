// Package affinity answers one question about the running process's CPU
// affinity, which the progress engine (whether to spin) and the TCP
// transport (how large a socket's buffers) both ask: did a launcher bind
// this process to CPUs of its own?
package affinity

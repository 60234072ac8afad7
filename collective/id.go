package collective

// IDOf is the 32-bit id (Comm.ID, Record.Comm) of the communicator whose
// unique id (Comm.UID) is uid. For the world communicator, whose unique id
// rank 0 publishes in the rendezvous store (bootstrap.UIDKey), it is the job
// id that flowtel.JobID prints: a launcher learns it from the store.
func IDOf(uid string) uint32 { return hash32(uid) }

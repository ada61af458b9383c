package retention

// CrashFileLease drops a file lease's host lock without releasing the
// lease, as a holder killed on another host leaves it: the lease file
// names it until it expires. For the contract tests (leasetest).
func CrashFileLease(l HeldLease) { _ = l.(*Lease).lock.Unlock() }

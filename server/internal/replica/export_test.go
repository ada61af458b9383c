package replica

// WriteJournal lets the tests make the folders a crash leaves in the
// middle of a snapshot's swap.
var WriteJournal = writeJournal

// OwePrune lets the tests make the folders a crash between a snapshot's
// swap and its prune leaves.
var OwePrune = owePrune

package replica

import "github.com/progressdb/progressdb/server/pkg/store"

// Folder is where a replica's store lives, for catching up by snapshot
// (docs/replication-design.md §7).
type Folder struct {
	// Dir is the store's database folder.
	Dir string
	// Open opens the store in dir as the node opens its shards (the
	// restored state, then the folder it is moved to).
	Open func(dir string) (*store.Store, error)
}

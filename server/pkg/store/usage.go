package store

import "fmt"

// Usage is how much room the database takes, and how much its file system
// has left: what an operator watches before a disk fills up.
type Usage struct {
	// DiskBytes is every file of the database: tables (live, and obsolete
	// ones not yet removed), logs, manifest, options.
	DiskBytes uint64
	// CompactionDebt is Pebble's estimate of the bytes compactions still
	// have to rewrite to bring the tree back in shape; it grows when
	// compactions fall behind writes (or after a large purge).
	CompactionDebt uint64
	// VolumeFree and VolumeSize are of the file system holding the
	// database; VolumeFree is what this process's user may still write
	// (blocks reserved for root excluded).
	VolumeFree, VolumeSize uint64
}

// Usage reports the database's size and its volume's free space.
func (s *Store) Usage() (Usage, error) {
	m := s.db.Metrics()
	u := Usage{DiskBytes: m.DiskSpaceUsage(), CompactionDebt: m.Compact.EstimatedDebt}
	free, size, err := volumeSpace(s.path)
	if err != nil {
		return u, fmt.Errorf("free space of %s: %w", s.path, err)
	}
	u.VolumeFree, u.VolumeSize = free, size
	return u, nil
}

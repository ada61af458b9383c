package keystore

import (
	"crypto/cipher"
	"hash/fnv"
	"sync"
)

// cache holds built AEADs, never raw keys, by thread: a thread's entry
// maps key numbers to AEADs and author HMACs to key numbers. When full, a
// whole thread's entry is evicted, chosen at random (Go's map order).
// Destruction evicts under the thread's stripe (keys.go), so no fill can
// put back a key a destroy removed.
type cache struct {
	mu      sync.RWMutex
	max     int
	n       int
	threads map[string]*threadKeys
}

type threadKeys struct {
	aeads   map[uint32]cipher.AEAD
	authors map[[32]byte]uint32
}

func newCache(max int) *cache {
	return &cache{max: max, threads: map[string]*threadKeys{}}
}

func (c *cache) byAuthor(tid string, mac [32]byte) (uint32, cipher.AEAD, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t := c.threads[tid]
	if t == nil {
		return 0, nil, false
	}
	num, ok := t.authors[mac]
	if !ok {
		return 0, nil, false
	}
	a, ok := t.aeads[num]
	return num, a, ok
}

func (c *cache) byNumber(tid string, num uint32) (cipher.AEAD, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t := c.threads[tid]
	if t == nil {
		return nil, false
	}
	a, ok := t.aeads[num]
	return a, ok
}

// put adds a key; mac is nil when the author is not known (a fill by
// number).
func (c *cache) put(tid string, num uint32, mac *[32]byte, a cipher.AEAD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.threads[tid]
	if t == nil {
		for c.n >= c.max && len(c.threads) > 0 {
			for victim, vt := range c.threads {
				c.n -= len(vt.aeads)
				delete(c.threads, victim)
				break
			}
		}
		t = &threadKeys{aeads: map[uint32]cipher.AEAD{}, authors: map[[32]byte]uint32{}}
		c.threads[tid] = t
	}
	if _, ok := t.aeads[num]; !ok {
		c.n++
	}
	t.aeads[num] = a
	if mac != nil {
		t.authors[*mac] = num
	}
}

// dropThread evicts every key of a thread.
func (c *cache) dropThread(tid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.threads[tid]; t != nil {
		c.n -= len(t.aeads)
		delete(c.threads, tid)
	}
}

// dropKey evicts one key of a thread and its author's entry.
func (c *cache) dropKey(tid string, num uint32, mac [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.threads[tid]
	if t == nil {
		return
	}
	if _, ok := t.aeads[num]; ok {
		c.n--
		delete(t.aeads, num)
	}
	delete(t.authors, mac)
}

func (c *cache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.threads = map[string]*threadKeys{}
	c.n = 0
}

// stripe is the lock of a thread's keys: fills and destroys of one thread
// take it, other threads go on.
func (ks *KeyStore) stripe(tid string) *sync.Mutex {
	return &ks.stripes[stripeOf(tid, len(ks.stripes))]
}

// stripeOf is a thread's slot among n locks.
func stripeOf(tid string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(tid))
	return int(h.Sum32() % uint32(n))
}

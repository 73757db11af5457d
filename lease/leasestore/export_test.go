package leasestore

// MemStoreWatches returns how many Lost watches m has open.
func MemStoreWatches(m *MemStore) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ws := range m.watches {
		n += len(ws)
	}
	return n
}

package norn

// FairFirst says which of two keys' next ready tasks a fair claim takes
// first: the better priority, then the key with less virtual time (see
// FairUnit). -1: a's, 1: b's, 0: they tie, and claim order (ready time,
// then id) decides. Both stores pick fair queues' tasks by it.
func FairFirst(aPriority, aVT, bPriority, bVT int64) int {
	switch {
	case aPriority != bPriority:
		if aPriority > bPriority {
			return -1
		}
		return 1
	case aVT != bVT:
		if aVT < bVT {
			return -1
		}
		return 1
	}
	return 0
}

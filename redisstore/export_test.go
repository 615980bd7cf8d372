package redisstore

// SetTakeAllHooks sets the functions a cross-slot TakeAll runs after its
// check and after its take (testHookAfterCheck, testHookAfterTake), for
// the external tests; nil, nil clears them.
func SetTakeAllHooks(afterCheck, afterTake func()) {
	testHookAfterCheck, testHookAfterTake = afterCheck, afterTake
}

// Slot is the Cluster hash slot of a Redis key.
var Slot = slot

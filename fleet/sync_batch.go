package fleet

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/redisstore"
)

// The batch side of Sync: the loop that sends every interval's hits and
// reads back the global states, Flush, and Close.

// loop sends a batch every interval until Close.
func (s *Sync) loop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	var prev []*syncEntry
	for {
		select {
		case <-s.stop:
			s.closeErr = s.last()
			return
		case <-t.C:
			prev, _ = s.flush(prev, nil)
		}
	}
}

// last sends Close's batch, the loop's last: the hits not yet sent of
// every key, then, in as many batches more as it takes, those that waited:
// for ops in doubt (maxDoubts), sent again in the first, or for the entry
// a key's entry took over from (see before), one link of the chain a
// batch. closed is set: once a key's lock is taken here, no
// decision records a hit on it and no read of it starts (see acquire), so
// what last finds under each key's lock is all there will be. A decision
// that recorded its hit before that but has not yet put the key in the
// next batch (touch) is why every key is looked at, not only those
// touched. It waits for the reads of keys under way (each bounded by the
// store's timeout), whose hits come back to be sent if they fail. It
// returns the batch's error.
func (s *Sync) last() error {
	var unsent []*syncEntry
	held := s.held()
	for _, e := range held {
		e.mu.Lock()
		for e.loading != nil {
			ch := e.loading
			e.mu.Unlock()
			<-ch
			e.mu.Lock()
		}
		if e.unsent() {
			unsent = append(unsent, e)
		}
		e.mu.Unlock()
	}
	_, err := s.flush(nil, unsent)
	return s.drain(err, len(held))
}

// drain sends, after Close and a batch whose error was err, the batches
// the hits that waited need (see last), held being the entries held then,
// and returns the error of the last one sent.
func (s *Sync) drain(err error, held int) error {
	// No hit is recorded now, and a batch that succeeds sends the ops in
	// doubt and the hits of each chain's first entry that still has some:
	// the entries held, plus one, bound the batches.
	for n := 0; err == nil && s.waiting() && n <= held; n++ {
		_, err = s.flush(nil, nil)
	}
	return err
}

// held returns every entry that may have hits not yet sent: those of
// s.keys, those they took over from and that are not quiet (see before),
// and those touched.
func (s *Sync) held() []*syncEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[*syncEntry]bool, len(s.keys)+len(s.touched))
	es := make([]*syncEntry, 0, len(s.keys)+len(s.touched))
	add := func(e *syncEntry) {
		for ; e != nil && !seen[e]; e = e.prev.Load() {
			seen[e] = true
			es = append(es, e)
		}
	}
	for _, e := range s.touched {
		add(e)
	}
	for _, e := range s.keys {
		add(e)
	}
	return es
}

// flush sends one batch with every key decided on since the last one, and
// also (if not among them), and forgets the keys of the batch before
// (prev) that nobody decided on since: their views are too old to use, and
// their next decision reads them again. It returns this batch's keys and
// error.
func (s *Sync) flush(prev, also []*syncEntry) ([]*syncEntry, error) {
	s.flushing <- struct{}{}
	defer func() { <-s.flushing }()
	s.mu.Lock()
	batch := s.touched
	s.touched = nil
	if len(also) > 0 {
		in := make(map[*syncEntry]bool, len(batch))
		for _, e := range batch {
			in[e] = true
		}
		for _, e := range also {
			if !in[e] {
				batch = append(batch, e)
			}
		}
	}
	s.recent.shift(1)
	s.keys = compactKeys(s.keys, &s.dels)
	s.mu.Unlock()
	for _, e := range prev {
		e.mu.Lock()
		if !e.touched.Load() && !e.unsent() && !e.inflight && e.loading == nil {
			e.dead.Store(true)
		}
		s.hush(e)
		e.mu.Unlock()
	}
	// The batch: keys with hits to send, and keys in use whose view is an
	// interval old (a key decided only by its first read is fresh).
	ops := make([]redisstore.SyncOp, 0, len(batch))
	var sent []*syncEntry
	// Announce the batch before any key is marked in flight, so that a
	// decision waiting for a key's batch waits for this one.
	done := make(chan struct{})
	defer close(done)
	s.mu.Lock()
	s.batch = done
	s.mu.Unlock()
	start := time.Now()
	for _, e := range batch {
		e.mu.Lock()
		e.touched.Store(false)
		switch {
		case e.inflight || e.loading != nil:
			s.touch(e) // a load is reading it; next batch
		case e.unsent() || start.Sub(e.synced) >= s.opts.Interval:
			n := len(ops)
			ops = s.snapshot(e, ops)
			for range len(ops) - n {
				sent = append(sent, e)
			}
		}
		e.mu.Unlock()
	}
	if len(ops) == 0 {
		return batch, nil
	}
	return batch, s.send(ops, sent)
}

// send sends a batch, ops, made of the entries sent, settles them with
// its reply, counts it and returns its error.
func (s *Sync) send(ops []redisstore.SyncOp, sent []*syncEntry) error {
	// The batch outlives no Close: bound it by the store's own timeout.
	start := time.Now()
	err := s.inner.Sync(context.Background(), ops)
	took := time.Since(start)
	mid, now := start.Add(took/2), time.Now()
	// An entry may send several ops (those of a batch in doubt, and its
	// new hits): the batch counts its entries.
	keys := 0
	for i := 0; i < len(ops); { // an entry's ops are together, in order
		e, j := sent[i], i+1
		for j < len(ops) && sent[j] == e {
			j++
		}
		e.mu.Lock()
		s.settle(e, ops[i:j], mid, now)
		e.mu.Unlock()
		i = j
		keys++
	}
	s.batches.Add(1)
	s.batchKeys.Add(uint64(keys))
	if err != nil {
		s.batchErrs.Add(1)
	}
	if s.opts.OnBatch != nil {
		s.opts.OnBatch(keys, took, err)
	}
	return err
}

// waiting reports whether keys wait for a batch.
func (s *Sync) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.touched) > 0
}

// Flush sends a batch now, as the loop does every interval (after the
// loop's batch in flight, if any), and returns its error. After Close it
// sends, as Close does, as many batches as the hits still held need, and
// returns the last one's error.
func (s *Sync) Flush() error {
	_, err := s.flush(nil, nil)
	if s.closed.Load() {
		err = s.drain(err, len(s.held()))
	}
	return err
}

// Forget sends the hits not yet sent of the keys match selects, in one
// batch, and lets those keys go: a later decision of one starts over from
// the shared store, as for a key never seen. The other keys keep their
// views and their hits pending. match gets each key's Namespace and Key.
// Use it when the keys are done with (their limit changed, or is no
// longer enforced here) and no decision of them is under way: a decision
// racing with Forget makes the key anew. If the batch fails, its hits are
// sent with the next one, as a batch's are (and those of the key's next
// entry after them); Forget returns its error.
// After Close it does nothing.
func (s *Sync) Forget(match func(namespace, key string) bool) error {
	if s.closed.Load() {
		return nil
	}
	// One batch at a time, so that no entry is in a batch in flight.
	s.flushing <- struct{}{}
	defer func() { <-s.flushing }()
	var gone []*syncEntry
	s.mu.Lock()
	for k, e := range s.keys {
		if match(k.ns, k.key) {
			gone = append(gone, e)
		}
	}
	s.mu.Unlock()
	return s.letGo(gone)
}

// letGo sends the hits not yet sent of the entries gone, in one batch,
// and lets them go (see Forget). The caller holds the flushing token.
func (s *Sync) letGo(gone []*syncEntry) error {
	var ops []redisstore.SyncOp
	var sent []*syncEntry
	for _, e := range gone {
		e.mu.Lock()
		e.dead.Store(true)
		// A key being read has its hits in that read; if it fails they
		// come back and go with the next batch.
		if e.unsent() && !e.inflight && e.loading == nil {
			n := len(ops)
			ops = s.snapshot(e, ops)
			for range len(ops) - n {
				sent = append(sent, e)
			}
		}
		// Gone now if it has nothing to send; else once it has sent it
		// (see hush): the key's next entry waits for that (see before).
		s.hush(e)
		e.mu.Unlock()
	}
	if len(ops) == 0 {
		return nil
	}
	return s.send(ops, sent)
}

// Close sends the hits not yet sent and stops the batch loop; it returns
// the error of that last batch. If it failed, the hits it could not send
// are still held: Flush sends them (the daemon tries every second until it
// succeeds). Decisions after Close go to the shared store, exactly. A
// decision under way when Close runs (a request still being served) either
// records its hit before that last batch looks at its key, and the batch
// sends it, or is decided in the shared store: none counts only locally.
// Close waits for the reads of keys under way (each bounded by the
// store's timeout).
func (s *Sync) Close() error {
	if s.closed.Swap(true) {
		<-s.done
		return nil
	}
	close(s.stop)
	<-s.done
	return s.closeErr
}

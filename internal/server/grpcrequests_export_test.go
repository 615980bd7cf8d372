package server

// RequestBytesPeak returns the most bytes of requests not yet whole the
// listener held at once, within its bound, for the tests.
func (g *GRPC) RequestBytesPeak() int64 {
	_, peak := g.requests.held()
	return peak
}

package rules

// PartKind is the kind of one key part.
type PartKind uint8

// The key parts of SPEC §4.
const (
	PartIP     PartKind = iota + 1 // ip: the client address (see package clientip)
	PartHeader                     // header:NAME: the first value of request header NAME
	PartQuery                      // query:NAME: the first value of query parameter NAME
	PartCookie                     // cookie:NAME: the value of cookie NAME
	PartMethod                     // method: the request method, upper case; HEAD counts as GET
	PartPath                       // path: the request path, cleaned
)

// Part is one compiled key part. Name is the header (canonical form),
// query parameter or cookie name; empty for the other kinds.
type Part struct {
	Kind PartKind
	Name string
}

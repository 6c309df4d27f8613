package leasekit

// Admits reports whether identity may acquire the lease during the reservation: the Go
// statement of the rule acquire.lua enforces, for the tests.
func (r *Reservation) Admits(identity string) bool {
	if r.Target != "" {
		return identity == r.Target
	}
	return identity != r.Resigned.Identity
}

// Package scale is the multi-process scale benchmark of election.Group: a test,
// TestScale, that runs bench/cmd/scalereplica as separate replica processes against a real
// redis-server (standalone, or a 3-master Redis Cluster), measures the time to a fair spread,
// the steady-state cost per replica and on Redis, the time for a killed replica's share to be
// held again, and checks from every replica's term records that no lease was ever held by two
// processes at once. It runs only when ELECTOR_SCALE is set; see README.md.
package scale

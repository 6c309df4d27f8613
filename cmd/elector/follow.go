package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// observerIdentity is the identity of the Elector that status --watch and resign make only to
// observe: it never campaigns, so the name is never written.
const observerIdentity = "elector-observer"

// observeLease returns an Elector that only observes co's lease (it has no callbacks, so it
// cannot Run): status --watch and resign follow the lease with its Observe, which keeps the
// follower rules (read after every resubscription, retry a failed read, read at the expiry of
// the term last seen, give up on errors retrying cannot cure) and bounds each call as the
// library does. The CLI keeps no follower loop of its own.
func observeLease(co *commonOptions, client redis.UniversalClient) (*election.Elector, error) {
	return election.New(election.Config{
		Client: client, LeaseName: co.lease.name, KeyPrefix: co.lease.prefix, Identity: observerIdentity,
		LeaseDuration: co.lease.leaseDuration, RenewDeadline: co.lease.renewDeadline, RetryPeriod: co.lease.retryPeriod,
	})
}

// changeStatus is the output of a Change: the new term for held, acquired and renewed; the
// holder and token of the term that ended for released and expired; no holder for free.
func changeStatus(name, key string, c election.Change) leaseStatus {
	switch c.Kind {
	case "held", "acquired", "renewed":
		return newLeaseStatus(name, key, lease.Status{Held: true, Record: lease.Record(c.Record), TTL: c.TTL})
	case "released", "expired":
		return leaseStatus{Lease: name, Key: key, Holder: c.Record.Identity, Instance: c.Record.Instance, Token: c.Record.Token}
	}
	return leaseStatus{Lease: name, Key: key}
}

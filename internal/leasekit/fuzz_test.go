package leasekit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// FuzzParseEvent checks the decoder of the events channel, which reads what anybody who may
// PUBLISH on the channel sent: it never panics, and an accepted event has a known kind, a valid
// record and a lease time that is a whole, non-negative number of milliseconds, and it encodes
// back to an equal event.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		"acquired 15000 v1:1764441600123456:9f86d081884c7d65:billing-7d9f8-x2x4q",
		"renewed 15000 v1:6:abc:pod",
		"released 0 v1:5:abc:pod a",
		"released 0 v1:5:abc:ns/pod:with:colons",
		"acquired 007 v1:1:a:b",
		"acquired +5 v1:1:a:b",
		"expired 0 v1:5:a:b",
		"acquired 10 junk",
		"acquired -1 v1:5:a:b",
		"acquired  v1:5:a:b",
		"",
		" ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		ev, err := ParseEvent(payload)
		if err != nil {
			if ev != (Event{}) {
				t.Fatalf("ParseEvent(%q) returned %+v with error %v", payload, ev, err)
			}
			return
		}
		if ev.Kind != Acquired && ev.Kind != Renewed && ev.Kind != Released {
			t.Fatalf("ParseEvent(%q): unknown kind %v accepted", payload, ev.Kind)
		}
		if ev.TTL < 0 || ev.TTL%time.Millisecond != 0 {
			t.Fatalf("ParseEvent(%q): lease time %v is negative or not whole milliseconds", payload, ev.TTL)
		}
		if _, err := ParseRecord(ev.Record.String()); err != nil {
			t.Fatalf("ParseEvent(%q) accepted record %q that ParseRecord refuses: %v", payload, ev.Record, err)
		}
		again, err := ParseEvent(encodeEvent(ev))
		if err != nil || again != ev {
			t.Fatalf("ParseEvent(%q) = %+v, whose encoding %q parses to %+v, %v", payload, ev, encodeEvent(ev), again, err)
		}
	})
}

// encodeEvent writes an event the way the scripts publish it: "<kind> <ttl_ms> <record>".
func encodeEvent(ev Event) string {
	return ev.Kind.String() + " " + strconv.FormatInt(ev.TTL.Milliseconds(), 10) + " " + ev.Record.String()
}

// FuzzEventRoundTrip checks that every event the scripts can publish (a kind, a lease time in
// milliseconds as Acquire and Renew accept it, a record with a valid identity) decodes to
// exactly what was published.
func FuzzEventRoundTrip(f *testing.F) {
	f.Add(uint8(1), int64(15000), int64(1764441600123456), "9f86d081884c7d65", "billing-7d9f8-x2x4q")
	f.Add(uint8(3), int64(0), int64(1), "a", "pod a:with spaces")
	f.Add(uint8(2), int64(1), int64(1<<53), "A_-9", "ünïcode")
	f.Fuzz(func(t *testing.T, kind uint8, ms, token int64, instance, identity string) {
		k := EventKind(kind%3 + 1)
		if ms < 0 || ms > int64(time.Duration(1<<63-1)/time.Millisecond) || token <= 0 ||
			leasewire.ValidateInstance(instance) != nil || leasewire.ValidateIdentity(identity) != nil {
			return
		}
		ev := Event{Kind: k, TTL: time.Duration(ms) * time.Millisecond, Record: lease.Record{Token: token, Instance: instance, Identity: identity}}
		got, err := ParseEvent(encodeEvent(ev))
		if err != nil || got != ev {
			t.Fatalf("ParseEvent(%q) = %+v, %v; want %+v", encodeEvent(ev), got, err, ev)
		}
	})
}

// FuzzNewLease checks the validation of names, prefixes and identities: whatever New accepts
// gives keys whose Cluster hash tag is exactly the lease name (so all keys of a lease share a
// slot and no two names share keys), and an identity that survives the record encoding.
func FuzzNewLease(f *testing.F) {
	for _, s := range [][3]string{
		{"job", "", "pod-a"},
		{"billing-cron", "elector", "ns/pod:with:colons"},
		{"a{b}", "", "x"},
		{"tenant/42", "a}b", "y"},
		{"ünïcode", "p", "pod\nb"},
		{"name with space", "", "z"},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	f.Cleanup(func() { _ = client.Close() })
	f.Fuzz(func(t *testing.T, name, prefix, identity string) {
		l, err := New(client, name, lease.Options{Prefix: prefix, Identity: identity})
		if err != nil {
			if !strings.Contains(err.Error(), "new lease") {
				t.Fatalf("New(%q, %q, %q) error %q does not say what failed", name, prefix, identity, err)
			}
			return
		}
		for _, key := range []string{l.Keys().Lease, l.Keys().Token, l.Keys().Terms, l.Keys().Events} {
			if tag := hashTag(key); tag != name {
				t.Fatalf("New(%q, prefix %q): key %q has hash tag %q, want the name", name, prefix, key, tag)
			}
		}
		if identity == "" {
			return
		}
		rec := lease.Record{Token: 1, Instance: l.Instance(), Identity: identity}
		got, err := ParseRecord(rec.String())
		if err != nil || got != rec {
			t.Fatalf("identity %q accepted by New does not survive the record: %+v, %v", identity, got, err)
		}
		if strings.ContainsAny(identity, "\r\n") {
			t.Fatalf("identity %q with a line break accepted", identity)
		}
	})
}

// hashTag returns the part of key that Redis Cluster hashes: the bytes between the first '{'
// and the first '}' after it when that is not empty, else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func TestParseEvent(t *testing.T) {
	ev, err := ParseEvent("released 0 v1:5:abc:pod a")
	if err != nil || ev.Kind != Released || ev.TTL != 0 || ev.Record != (lease.Record{Token: 5, Instance: "abc", Identity: "pod a"}) {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	ev, err = ParseEvent("renewed 15000 v1:6:abc:pod")
	if err != nil || ev.Kind != Renewed || ev.TTL != 15*time.Second || ev.Record != (lease.Record{Token: 6, Instance: "abc", Identity: "pod"}) {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	if Renewed.String() != "renewed" || EventKind(9).String() != "EventKind(9)" {
		t.Fatalf("EventKind.String: %q %q", Renewed, EventKind(9))
	}
	for _, bad := range []string{"", "released", "released 0", "expired 0 v1:5:a:b", "acquired 10 junk", "acquired -1 v1:5:a:b", "acquired x v1:5:a:b"} {
		if _, err := ParseEvent(bad); err == nil {
			t.Errorf("ParseEvent(%q) succeeded", bad)
		}
	}
}

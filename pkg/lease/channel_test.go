package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestLeaseOfChannel: the parser of events channels accepts only its own prefix's channels.
func TestLeaseOfChannel(t *testing.T) {
	for _, c := range []struct {
		prefix, channel, name string
		ok                    bool
	}{
		{"elector", "elector:{job}:events", "job", true},
		{"", "elector:{job}:events", "", false}, // the caller defaults the prefix (leasewire.KeysFor)
		{"t?", "t?:{job}:events", "job", true},
		{"t?", "tx:{job}:events", "", false},
		{"t*", "t:{a}:b:{job}:events", "", false},
		{"elector", "elector:{job}:lease", "", false},
		{"elector", "elector:{}:events", "", false},
		{"elector", "other:{job}:events", "", false},
	} {
		name, ok := leasewire.LeaseOfChannel(c.prefix, c.channel)
		if name != c.name || ok != c.ok {
			t.Errorf("LeaseOfChannel(%q, %q) = %q, %v; want %q, %v", c.prefix, c.channel, name, ok, c.name, c.ok)
		}
	}
	if got, want := leasewire.EventsPattern(`a*b?[c]\`), `a\*b\?\[c\]\\:{*}:events`; got != want {
		t.Errorf("EventsPattern = %q, want %q", got, want)
	}
}

// TestEventsPatternMatchesOnlyItsPrefix (issue 23, item 6), against a real Redis: the pattern
// of a prefix with glob characters receives its own channels only, and an ACL user granted
// exactly &EventsPattern(prefix) may subscribe with it but not to another prefix's channel.
func TestEventsPatternMatchesOnlyItsPrefix(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const prefix = "jobs*"
	pattern := leasewire.EventsPattern(prefix)
	if err := admin.Do(ctx, "ACL", "SETUSER", "sub", "on", ">pw", "resetchannels", "&"+pattern, "-@all", "+psubscribe", "+subscribe", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "sub", "pw"
	user := redis.NewClient(opts)
	defer user.Close()

	ps := user.PSubscribe(ctx, pattern)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("PSUBSCRIBE %s as a user granted &%s: %v", pattern, pattern, err)
	}
	other := user.Subscribe(ctx, leasewire.KeysFor("jobs-b", "x").Events)
	defer other.Close()
	if got, err := other.Receive(ctx); err == nil {
		t.Errorf("the ACL rule &%s grants the channel of prefix jobs-b: %#v", pattern, got)
	}

	foreign, own := leasewire.KeysFor("jobs-b", "x").Events, leasewire.KeysFor(prefix, "x").Events
	for _, ch := range []string{foreign, own} {
		if err := admin.Publish(ctx, ch, ch).Err(); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Channel != own {
		t.Errorf("PSUBSCRIBE %s received %q first; want only %q", pattern, msg.Channel, own)
	}
}

// TestRefusedKeyAdvisesEscapedPattern, against a real Redis: when an ACL refuses Get the keys
// of a prefix with glob characters, the error and redisfail.Hint advise the key pattern with
// the prefix escaped, and that very pattern, granted, allows the keys of that prefix and not
// those of a prefix its unescaped form would match too.
func TestRefusedKeyAdvisesEscapedPattern(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const prefix, lookalike = "jobs?", "jobs1"
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "resetkeys", "~other:*", "-@all", "+multi", "+exec", "+get", "+pttl").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "reader", "pw"
	user := redis.NewClient(opts)
	defer user.Close()
	l, err := lease.New(user, "job", lease.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Get(ctx)
	const want = `~jobs\?:*`
	if err == nil || !strings.Contains(err.Error(), "allow its key pattern, "+want) {
		t.Fatalf("Get of keys outside the ACL: err = %v, want the advice to allow %s", err, want)
	}
	if hint := redisfail.Hint(err, redisfail.Names{}); !strings.Contains(hint, want) {
		t.Errorf("redisfail.Hint = %q, want it to name %s", hint, want)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "reader", "resetkeys", want).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get(ctx); err != nil {
		t.Errorf("Get with %s granted: %v", want, err)
	}
	other, err := lease.New(user, "job", lease.Options{Prefix: lookalike})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(ctx); err == nil {
		t.Errorf("%s grants the keys of prefix %s too", want, lookalike)
	}
}

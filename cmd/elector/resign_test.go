package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

func TestResignOptionsValidate(t *testing.T) {
	ok := resignOptions{holdOff: time.Second, timeout: time.Second, output: "text"}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mutate func(*resignOptions)
		flag   string
	}{
		{func(o *resignOptions) { o.to = "bad\tname" }, "--to"},
		{func(o *resignOptions) { o.holdOff = 0 }, "--hold-off"},
		{func(o *resignOptions) { o.holdOff = 1500 * time.Microsecond }, "--hold-off"},
		{func(o *resignOptions) { o.timeout = -time.Second }, "--timeout"},
		{func(o *resignOptions) { o.output = "xml" }, "--output"},
	} {
		o := ok
		tc.mutate(&o)
		if err := o.validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: %v, want an error naming %s", o, err, tc.flag)
		}
	}
	for _, v := range []string{"", "loopback", "any", "off"} {
		if err := validateResignEndpoint(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	if err := validateResignEndpoint("all"); err == nil || !strings.Contains(err.Error(), "--resign-endpoint") {
		t.Errorf("all: %v", err)
	}
}

// The policy of POST /resign, before the elector is asked: GET is 405; a peer that is not
// loopback is refused unless --resign-endpoint=any; off refuses everyone; a follower is 409.
func TestResignHandlerPolicy(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: not leading
	defer client.Close()
	e, err := election.New(election.Config{
		Client: client, LeaseName: "job", Identity: "pod-a",
		Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy, method, remote string
		want                   int
	}{
		{"loopback", http.MethodGet, "127.0.0.1:5000", http.StatusMethodNotAllowed},
		{"loopback", http.MethodPost, "10.1.2.3:5000", http.StatusForbidden},
		{"loopback", http.MethodPost, "[fd00::1]:5000", http.StatusForbidden},
		{"", http.MethodPost, "10.1.2.3:5000", http.StatusForbidden},
		{"off", http.MethodPost, "127.0.0.1:5000", http.StatusForbidden},
		{"loopback", http.MethodPost, "127.0.0.1:5000", http.StatusConflict},
		{"loopback", http.MethodPost, "[::1]:5000", http.StatusConflict},
		{"any", http.MethodPost, "10.1.2.3:5000", http.StatusConflict},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, "/resign", nil)
		req.RemoteAddr = tc.remote
		req.Header.Set(resignHeader, "1")
		resignHandler(e, resignPolicy{endpoint: tc.policy}, nil).ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s from %s with policy %q: %d %q, want %d", tc.method, tc.remote, tc.policy, rec.Code, rec.Body, tc.want)
		}
	}
}

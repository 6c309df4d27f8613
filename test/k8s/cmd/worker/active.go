package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// active is an app whose singleton work is observed from the app's own side, for the e2e's
// overlap measurements: it records when it starts and when it stops doing the work, with
// the time taken at that moment, as "pod instance token unix-ms start|stop" in the Redis
// list WORKER_LOG_KEY at WORKER_REDIS, and when its process comes up and goes down ("pod
// instance 0 unix-ms up|down"). pod is $HOSTNAME (the pod's name), instance is
// random per process, so that two pods of one name (a StatefulSet's) are told apart.
//
// In run mode (ELECTOR_FENCING_TOKEN set by elector run) it works from its start. In
// sidecar mode it asks $ELECTOR_LEADER_URL every 50 ms and works while the answer says it
// leads; an error or a follower's answer stops the work at the moment it is seen. On
// SIGTERM it goes on working for WORKER_STOP_DELAY (default 1s) as an app finishing its
// work does, then stops and exits.
//
// The records are queued and written until Redis takes them, so that a pod cut off from
// Redis (iptables) reports its times once it is reachable again: a record's time is the
// event's, not the write's.
func active() error {
	pod, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	instance := hex.EncodeToString(b[:])
	delay := time.Second
	if v := os.Getenv("WORKER_STOP_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("WORKER_STOP_DELAY %q: %w", v, err)
		}
		delay = d
	}
	rec := newRecorder(os.Getenv("WORKER_REDIS"), os.Getenv("WORKER_LOG_KEY"))
	note := func(token int64, event string) {
		rec.add(fmt.Sprintf("%s %s %d %d %s", pod, instance, token, time.Now().UnixMilli(), event))
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	note(0, "up")

	if v := os.Getenv("ELECTOR_FENCING_TOKEN"); v != "" {
		token, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("ELECTOR_FENCING_TOKEN %q: %w", v, err)
		}
		note(token, "start")
		<-sig
		time.Sleep(delay)
		note(token, "stop")
		note(0, "down")
		return rec.drain(10 * time.Second)
	}

	url := os.Getenv("ELECTOR_LEADER_URL")
	if url == "" {
		return fmt.Errorf("neither ELECTOR_FENCING_TOKEN (run mode) nor ELECTOR_LEADER_URL (sidecar mode) is set")
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	var working bool
	var token int64
	var stopAt time.Time
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			if stopAt.IsZero() {
				stopAt = time.Now().Add(delay)
			}
		case <-tick.C:
		}
		if !stopAt.IsZero() && !time.Now().Before(stopAt) {
			if working {
				note(token, "stop")
			}
			note(0, "down")
			return rec.drain(10 * time.Second)
		}
		leads, tok := askLeader(client, url)
		if working && (!leads || tok != token) {
			note(token, "stop")
			working = false
		}
		if leads && !working {
			token, working = tok, true
			note(token, "start")
		}
	}
}

// askLeader GETs /leader: whether this replica leads, and the term's token.
func askLeader(client *http.Client, url string) (bool, int64) {
	resp, err := client.Get(url)
	if err != nil {
		return false, 0
	}
	defer resp.Body.Close()
	var st struct {
		IsLeader bool  `json:"isLeader"`
		Token    int64 `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return false, 0
	}
	return st.IsLeader, st.Token
}

// recorder writes records to a Redis list in order, retrying each until it is taken.
type recorder struct {
	mu      sync.Mutex
	pending []string
	wake    chan struct{}
	empty   chan struct{} // closed and replaced whenever pending drains
}

func newRecorder(addr, key string) *recorder {
	r := &recorder{wake: make(chan struct{}, 1), empty: make(chan struct{})}
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	go func() {
		for {
			r.mu.Lock()
			if len(r.pending) == 0 {
				close(r.empty)
				r.empty = make(chan struct{})
				r.mu.Unlock()
				<-r.wake
				continue
			}
			next := r.pending[0]
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := client.RPush(ctx, key, next).Err()
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "worker active: record:", err)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			r.mu.Lock()
			r.pending = r.pending[1:]
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *recorder) add(line string) {
	fmt.Println(line)
	r.mu.Lock()
	r.pending = append(r.pending, line)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// drain waits until every record is written, at most limit.
func (r *recorder) drain(limit time.Duration) error {
	deadline := time.After(limit)
	for {
		r.mu.Lock()
		n, empty := len(r.pending), r.empty
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-empty:
		case <-deadline:
			return fmt.Errorf("%d records not written within %v", n, limit)
		}
	}
}

// Package faultproxy is a TCP proxy for tests that sits between a client and Redis and injects
// network faults: severed connections, a black hole (partition), refused connections, latency and
// a moving target.
//
// Semantics chosen for the black hole: while it is on, every byte read in either direction is
// dropped and new connections are accepted but never connected upstream, so clients see a silent
// network (their commands time out). Because bytes were lost, no connection that was blackholed
// can carry a valid stream afterwards: turning the black hole off closes all of them, and only new
// connections are forwarded again.
//
// It owns the proxied connections and the faults. It must not parse the Redis protocol: the
// faults are on bytes and connections, as a network has them.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// dialTimeout bounds connecting to the target for one accepted connection.
	dialTimeout = 5 * time.Second
	// queueChunks is how many chunks per direction may be in flight (delayed) at once.
	queueChunks = 64
	// chunkSize is the read buffer size per direction.
	chunkSize = 32 << 10
)

// Proxy forwards every connection accepted on a loopback port to a target address, with faults
// switched on and off by the test. All methods are safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	latency atomic.Int64 // one-way delay per chunk, a time.Duration

	mu        sync.Mutex
	target    string
	blackhole bool
	refuse    bool
	closed    bool
	conns     map[*conn]struct{}

	wg sync.WaitGroup // every goroutine of the proxy
}

// New listens on 127.0.0.1:0 and forwards every accepted connection to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Start calls New and closes the proxy at t.Cleanup; it fails the test when New fails.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatalf("start proxy to %s: %v", target, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients should connect to, "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address new connections are forwarded to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget makes new connections go to addr (for example a server restarted on another port or a
// promoted replica). Open connections keep their old upstream; Cut them to force a move.
func (p *Proxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// Cut severs all open connections now, closing both the client and the upstream side. New
// connections are still accepted.
func (p *Proxy) Cut() {
	for _, c := range p.snapshot() {
		c.close()
	}
}

// Blackhole switches the black hole on or off. While on, bytes in both directions are silently
// dropped on open connections, and new connections are accepted but never reach the target, like a
// network partition. Turning it off closes every connection that was blackholed (its stream has
// lost bytes) and lets new connections through again.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
	for _, c := range p.snapshot() {
		if on {
			c.blackholed.Store(true)
		} else if c.blackholed.Load() {
			c.close()
		}
	}
}

// Refuse switches refusing on or off. While on, new connections are reset at once (the client
// sees its connection reset or closed, like a port with nothing listening); open connections are
// not affected.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// SetLatency delays every chunk of data by d in each direction (so a round trip takes at least
// 2*d longer), preserving the order of the bytes. It applies to data read from now on; 0 turns it
// off.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Conns returns the number of open client connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes all connections and waits until every goroutine of the proxy has
// returned. Closing a closed proxy does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	if err != nil {
		return fmt.Errorf("faultproxy: close listener: %w", err)
	}
	return nil
}

func (p *Proxy) snapshot() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: back off and retry
			continue
		}
		p.handle(client)
	}
}

// handle registers an accepted connection and starts forwarding it.
func (p *Proxy) handle(client net.Conn) {
	p.mu.Lock()
	if p.closed || p.refuse {
		p.mu.Unlock()
		reset(client)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{p: p, client: client, done: make(chan struct{}), cancelDial: cancel}
	c.blackholed.Store(p.blackhole)
	target := p.target
	p.conns[c] = struct{}{}
	p.wg.Add(1) // under p.mu and before closed is set, so never after Close's Wait has begun
	p.mu.Unlock()
	go c.run(ctx, target)
}

// reset closes conn with an RST instead of a FIN where possible.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// conn is one proxied client connection.
type conn struct {
	p          *Proxy
	client     net.Conn
	done       chan struct{} // closed by close
	closeOnce  sync.Once
	cancelDial context.CancelFunc
	blackholed atomic.Bool

	mu       sync.Mutex
	upstream net.Conn // nil until dialled
	closed   bool
}

// chunk is data read from one side, due to be written to the other side at due.
type chunk struct {
	data []byte
	due  time.Time
}

// run connects upstream and starts the four forwarding loops; a connection that is blackholed
// from the start never connects and only swallows what the client sends.
func (c *conn) run(ctx context.Context, target string) {
	defer c.p.wg.Done()
	if c.blackholed.Load() {
		buf := make([]byte, chunkSize)
		for {
			if _, err := c.client.Read(buf); err != nil {
				c.close()
				return
			}
		}
	}
	d := net.Dialer{Timeout: dialTimeout}
	up, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		reset(c.client) // the target is down: the client sees what it would see without us
		c.close()
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = up.Close()
		return
	}
	c.upstream = up
	c.mu.Unlock()

	toUp := make(chan chunk, queueChunks)
	toClient := make(chan chunk, queueChunks)
	c.p.wg.Add(4)
	go c.read(c.client, toUp)
	go c.write(toUp, up)
	go c.read(up, toClient)
	go c.write(toClient, c.client)
}

// read copies data from src into out, stamped with its due time, until src fails; then it closes
// out so that write can flush what is queued.
func (c *conn) read(src net.Conn, out chan<- chunk) {
	defer c.p.wg.Done()
	defer close(out)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.blackholed.Load() {
			ch := chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(c.p.latency.Load()))}
			select {
			case out <- ch:
			case <-c.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes queued chunks to dst when they are due. When the queue ends (the source side
// closed) or a write fails, the whole connection is closed.
func (c *conn) write(in <-chan chunk, dst net.Conn) {
	defer c.p.wg.Done()
	defer c.close()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-in:
			if !ok {
				return
			}
		case <-c.done:
			return
		}
		if wait := time.Until(ch.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		if c.blackholed.Load() {
			continue
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}

// close closes both sides once and forgets the connection.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.cancelDial()
		_ = c.client.Close()
		c.mu.Lock()
		c.closed = true
		if c.upstream != nil {
			_ = c.upstream.Close()
		}
		c.mu.Unlock()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

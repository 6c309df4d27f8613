package election

import "sync"

// notifier calls OnNewLeader with each new leader identity, in order, from one goroutine, so
// that a slow callback delays neither the election nor itself runs concurrently.
type notifier struct {
	fn      func(string)
	mu      sync.Mutex
	queue   []string
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
}

func startNotifier(fn func(string)) *notifier {
	n := &notifier{fn: fn, wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	if fn == nil {
		close(n.done)
		return n
	}
	go n.loop()
	return n
}

// push queues identity for OnNewLeader.
func (n *notifier) push(identity string) {
	if n == nil || n.fn == nil {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, identity)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// stop delivers what is queued and waits for the goroutine to end.
func (n *notifier) stop() {
	if n.fn != nil {
		close(n.stopped)
	}
	<-n.done
}

func (n *notifier) loop() {
	defer close(n.done)
	for {
		n.mu.Lock()
		queue := n.queue
		n.queue = nil
		n.mu.Unlock()
		for _, id := range queue {
			n.fn(id)
		}
		if len(queue) > 0 {
			continue
		}
		select {
		case <-n.wake:
		case <-n.stopped:
			n.mu.Lock()
			rest := n.queue
			n.mu.Unlock()
			if len(rest) == 0 {
				return
			}
		}
	}
}

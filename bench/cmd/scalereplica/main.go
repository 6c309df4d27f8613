// Command scalereplica is one replica of the scale benchmark (bench/scale): it runs one
// election.Group for the leases tenant-%07d, [offset, offset+count), against a standalone
// Redis or a Redis Cluster, and records every term of every lease, so that the driver can
// measure the spread and the takeover after a kill and check that no lease was ever held by
// two processes at once.
//
// Term records go to the file named by -terms as fixed 13-byte records, little-endian:
//
//	kind  byte   'S' OnStartedLeading entered, 'E' the term's ctx was cancelled (the work
//	             stopped; with -return-at-once, when the function given to context.AfterFunc
//	             ran), 'N' OnStoppedLeading called
//	index uint32 the lease's number (tenant-%07d)
//	ns    int64  time.Now().UnixNano() (all processes on one machine share the clock)
//
// The records are written as soon as the writer goroutine sees them, so that a replica killed
// with SIGKILL loses at most the few records not yet written.
//
// Every -report interval it prints one line to stdout,
//
//	report <unix-ns> <cpu-ns> <heap-inuse-bytes> <heap-live-bytes> <held>
//
// with the user+system CPU time of the process so far (getrusage), the Go heap in use and
// live after the last GC (runtime/metrics), and the terms whose work is running. SIGTERM or
// SIGINT stops the Group gracefully (every term ends and is released), then it prints
// "stopped <unix-ns>" and exits 0.
//
// With -profile DIR, SIGUSR1 starts a CPU profile and SIGUSR2 stops it, writing DIR/cpu.pprof
// and DIR/heap.pprof (the driver profiles one replica over the steady-state window).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

// namePrefix starts the lease names, tenant-0000042.
const namePrefix = "tenant-"

// Record kinds of the terms file.
const (
	kindStart   = 'S'
	kindEnd     = 'E'
	kindStopped = 'N'
)

// recordSize is the size of one term record in bytes.
const recordSize = 13

type config struct {
	addrs         string
	cluster       bool
	group         string
	identity      string
	count, offset int
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	terms         string
	report        time.Duration
	profile       string
	returnAtOnce  bool
}

func main() {
	var c config
	flag.StringVar(&c.addrs, "addrs", "127.0.0.1:6379", "Redis address, or the Cluster's node addresses, comma-separated")
	flag.BoolVar(&c.cluster, "cluster", false, "use a Redis Cluster client (redis.ClusterClient) over -addrs")
	flag.StringVar(&c.group, "group", "scale", "the Group's name, shared by the replicas")
	flag.StringVar(&c.identity, "identity", "", "this replica's identity (default: scale-<pid>)")
	flag.IntVar(&c.count, "count", 100000, "number of leases")
	flag.IntVar(&c.offset, "offset", 0, "number of the first lease (tenant-%07d)")
	flag.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	flag.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	flag.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "RetryPeriod")
	flag.StringVar(&c.terms, "terms", "", "file the term records are written to (required)")
	flag.DurationVar(&c.report, "report", 250*time.Millisecond, "interval of the report lines on stdout")
	flag.StringVar(&c.profile, "profile", "", "directory for cpu.pprof (SIGUSR1 starts, SIGUSR2 stops) and heap.pprof (at SIGUSR2)")
	flag.BoolVar(&c.returnAtOnce, "return-at-once", false, "OnStartedLeading returns at once and the term's end is recorded by context.AfterFunc (no goroutine per term); default: it blocks until ctx is cancelled")
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "scalereplica:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.terms == "" {
		return fmt.Errorf("-terms is required")
	}
	if c.count <= 0 || c.offset < 0 || c.offset+c.count > 1e7 {
		return fmt.Errorf("-count %d -offset %d: the leases must lie within [0, 10,000,000)", c.count, c.offset)
	}
	if c.identity == "" {
		c.identity = "scale-" + strconv.Itoa(os.Getpid())
	}
	f, err := os.Create(c.terms)
	if err != nil {
		return fmt.Errorf("create terms file: %w", err)
	}
	rec := newRecorder(f)

	addrs := strings.Split(c.addrs, ",")
	var client redis.UniversalClient
	if c.cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	} else {
		client = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	}
	defer client.Close()

	names := make([]string, c.count)
	for i := range names {
		names[i] = fmt.Sprintf("%s%07d", namePrefix, c.offset+i)
	}
	var held atomic.Int64
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: c.group, Identity: c.identity, Leases: names,
		LeaseDuration: c.leaseDuration, RenewDeadline: c.renewDeadline, RetryPeriod: c.retryPeriod,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				idx := leaseIndex(name)
				rec.add(kindStart, idx, time.Now().UnixNano())
				held.Add(1)
				end := func() {
					rec.add(kindEnd, idx, time.Now().UnixNano())
					held.Add(-1)
				}
				if c.returnAtOnce {
					context.AfterFunc(ctx, end)
					return
				}
				<-ctx.Done()
				end()
			},
			OnStoppedLeading: func(name string) {
				rec.add(kindStopped, leaseIndex(name), time.Now().UnixNano())
			},
		},
	})
	if err != nil {
		return fmt.Errorf("new group: %w", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	out := bufio.NewWriter(os.Stdout)
	reportDone := make(chan struct{})
	go func() {
		defer close(reportDone)
		tick := time.NewTicker(c.report)
		defer tick.Stop()
		for {
			writeReport(out, held.Load())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	if c.profile != "" {
		go profileOnSignal(ctx, c.profile)
	}
	runErr := g.Run(ctx)
	<-reportDone
	writeReport(out, held.Load())
	if err := rec.close(); err != nil {
		return fmt.Errorf("write terms file: %w", err)
	}
	fmt.Fprintf(out, "stopped %d\n", time.Now().UnixNano())
	if err := out.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if runErr != nil {
		return fmt.Errorf("run group: %w", runErr)
	}
	return nil
}

// leaseIndex returns the number of lease tenant-NNNNNNN.
func leaseIndex(name string) uint32 {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, namePrefix))
	return uint32(n)
}

// heapSamples are the runtime/metrics the report reads: heap in use is objects plus the
// unused parts of in-use spans (MemStats.HeapInuse); live is the heap marked live by the last
// GC.
var heapSamples = []metrics.Sample{
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/gc/heap/live:bytes"},
}

// writeReport prints one report line and flushes it.
func writeReport(w *bufio.Writer, held int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := ru.Utime.Nano() + ru.Stime.Nano()
	metrics.Read(heapSamples)
	inuse := heapSamples[0].Value.Uint64() + heapSamples[1].Value.Uint64()
	live := heapSamples[2].Value.Uint64()
	fmt.Fprintf(w, "report %d %d %d %d %d\n", time.Now().UnixNano(), cpu, inuse, live, held)
	_ = w.Flush()
}

// recorder streams term records to a file from one writer goroutine: callbacks queue a
// record and return; the writer writes whatever is queued in one write call as soon as it
// sees it.
type recorder struct {
	ch   chan [recordSize]byte
	done chan error
}

func newRecorder(w io.WriteCloser) *recorder {
	r := &recorder{ch: make(chan [recordSize]byte, 1<<16), done: make(chan error, 1)}
	go func() {
		buf := make([]byte, 0, 64<<10)
		var err error
		for rec := range r.ch {
			buf = append(buf[:0], rec[:]...)
		more:
			for len(buf) < cap(buf)-recordSize {
				select {
				case rec, ok := <-r.ch:
					if !ok {
						break more
					}
					buf = append(buf, rec[:]...)
				default:
					break more
				}
			}
			if err == nil {
				_, err = w.Write(buf)
			}
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		r.done <- err
	}()
	return r
}

func (r *recorder) add(kind byte, idx uint32, ns int64) {
	var rec [recordSize]byte
	rec[0] = kind
	binary.LittleEndian.PutUint32(rec[1:], idx)
	binary.LittleEndian.PutUint64(rec[5:], uint64(ns))
	r.ch <- rec
}

// close writes what is queued and closes the file. No add may follow.
func (r *recorder) close() error {
	close(r.ch)
	return <-r.done
}

// profileOnSignal profiles the CPU from SIGUSR1 to SIGUSR2 and writes a heap profile at
// SIGUSR2, into dir. Failures are reported on stderr: the run goes on without the profile.
func profileOnSignal(ctx context.Context, dir string) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	var cpu *os.File
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			if err := profileStep(sig, dir, &cpu); err != nil {
				fmt.Fprintln(os.Stderr, "scalereplica: profile:", err)
			}
		}
	}
}

func profileStep(sig os.Signal, dir string, cpu **os.File) error {
	if sig == syscall.SIGUSR1 {
		if *cpu != nil {
			return nil
		}
		f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
		if err != nil {
			return fmt.Errorf("create cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("start cpu profile: %w", err)
		}
		*cpu = f
		return nil
	}
	if *cpu != nil {
		pprof.StopCPUProfile()
		err := (*cpu).Close()
		*cpu = nil
		if err != nil {
			return fmt.Errorf("write cpu profile: %w", err)
		}
	}
	runtime.GC()
	f, err := os.Create(filepath.Join(dir, "heap.pprof"))
	if err != nil {
		return fmt.Errorf("create heap profile: %w", err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return fmt.Errorf("write heap profile: %w", err)
	}
	return nil
}

// Command luacost measures what each piece of pkg/lease/scripts/acquire.lua costs Redis itself
// INFO commandstats usec per EVALSHA for the script as it ships, for copies
// with one piece removed, and for scripts that do one piece alone, interleaved in rounds against
// one redis-server that it starts, pipelined 100 at a time so that Redis is busy throughout.
//
//	cd bench && go run ./cmd/luacost            # prints a Markdown table: median (min–max) µs
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
)

type variant struct {
	name, src string
	keys      int
}

func main() {
	script := flag.String("script", "../pkg/lease/scripts/acquire.lua", "the acquire script")
	rounds := flag.Int("rounds", 9, "rounds; each runs every variant once, in a rotated order")
	per := flag.Int("n", 2000, "calls per variant and round")
	flag.Parse()
	if err := run(*script, *rounds, *per); err != nil {
		fmt.Fprintln(os.Stderr, "luacost:", err)
		os.Exit(1)
	}
}

func run(script string, rounds, per int) error {
	ctx := context.Background()
	src, err := os.ReadFile(script)
	if err != nil {
		return err
	}
	vs, err := variants(string(src))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "luacost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Start(ctx, filepath.Join(dir))
	if err != nil {
		return err
	}
	defer srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	res := make([][]float64, len(vs)+1) // the last: SET NX PX
	for r := range rounds {
		for j := range res {
			i := (j + r) % len(res)
			v := variant{name: "SET NX PX"}
			if i < len(vs) {
				v = vs[i]
			}
			us, err := measure(ctx, c, v, per)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			res[i] = append(res[i], us)
		}
	}
	fmt.Println("| script | Redis µs per call, median | min–max |\n|---|---:|---:|")
	for i, r := range res {
		slices.Sort(r)
		name := "SET NX PX (a command, not a script)"
		if i < len(vs) {
			name = vs[i].name
		}
		fmt.Printf("| %s | %.2f | %.2f–%.2f |\n", name, r[len(r)/2], r[0], r[len(r)-1])
	}
	return nil
}

// variants returns the scripts measured: the real one, copies with a piece removed, pieces alone.
func variants(full string) ([]variant, error) {
	var err error
	rm := func(s string, pairs ...string) string {
		for i := 0; i < len(pairs); i += 2 {
			if !strings.Contains(s, pairs[i]) && err == nil {
				err = fmt.Errorf("the script no longer contains %q", pairs[i])
			}
			s = strings.Replace(s, pairs[i], pairs[i+1], 1)
		}
		return s
	}
	vs := []variant{
		{"acquire.lua (3 keys, as the primitive)", full, 3},
		{"acquire.lua + resign key (4 keys, as pkg/election)", full, 4},
		{"− replicate_commands", rm(full, "if redis.replicate_commands then redis.replicate_commands() end", ""), 3},
		{"− TIME", rm(full, "local now = redis.call('TIME')\nlocal token = tonumber(now[1]) * 1000000 + tonumber(now[2])", "local token = 0"), 3},
		{"− terms counter (GET, SET)", rm(full, "if KEYS[3] then\n  terms", "if false then\n  terms", "if KEYS[3] then\n  redis.call('SET', KEYS[3]", "if false then\n  redis.call('SET', KEYS[3]"), 3},
		{"− PUBLISH", rm(full, "redis.call('PUBLISH', ARGV[3], 'acquired ' .. ARGV[2] .. ' ' .. record)", ""), 3},
		{"− token GET and SET", rm(full, "local last = redis.call('GET', KEYS[2])", "local last = nil", "redis.call('SET', KEYS[2], token)", ""), 3},
		{"`return 1` (3 keys, 3 args): the cost of any script", "return 1", 3},
		{"`return {1, ARGV[1], tonumber(ARGV[2])}`: the reply", "return {1, ARGV[1], tonumber(ARGV[2])}", 3},
		{"one GET (absent key)", "redis.call('GET', KEYS[2]) return 1", 3},
		{"one TIME", "redis.call('TIME') return 1", 3},
		{"one SET", "redis.call('SET', KEYS[2], '1') return 1", 3},
		{"one PUBLISH (no subscriber)", "redis.call('PUBLISH', ARGV[3], 'acquired 10000 v1:1764664391000000:0123456789abcdef:pod-a') return 1", 3},
		{"one string.format('%.0f', n)", "local s = string.format('%.0f', 1764664391 * 1000000 + 123456) return 1", 3},
	}
	return vs, err
}

var (
	keys = []string{"p:{n}:lease", "p:{n}:token", "p:{n}:terms", "p:{n}:resign"}
	args = []any{"0123456789abcdef:pod-a", 10000, "p:{n}:events"}
)

// measure runs v per times (each followed by a DEL of the lease key) and returns the usec per
// call that INFO commandstats counted for it.
func measure(ctx context.Context, c *redis.Client, v variant, per int) (float64, error) {
	stat := "set"
	sha := ""
	if v.src != "" {
		stat = "evalsha"
		var err error
		if sha, err = c.ScriptLoad(ctx, v.src).Result(); err != nil {
			return 0, err
		}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		return 0, err
	}
	for b := 0; b < per; b += 100 {
		p := c.Pipeline()
		for range 100 {
			if sha == "" {
				p.SetNX(ctx, keys[0], args[0], 10e9)
			} else {
				p.EvalSha(ctx, sha, keys[:v.keys], args...)
			}
			p.Del(ctx, keys[0])
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0, err
		}
	}
	return usecPerCall(ctx, c, stat)
}

// usecPerCall reads usec_per_call of cmd from INFO commandstats.
func usecPerCall(ctx context.Context, c *redis.Client, cmd string) (float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(kv, "="); k == "usec_per_call" {
				return strconv.ParseFloat(v, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in INFO commandstats", cmd)
}

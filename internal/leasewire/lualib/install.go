package lualib

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Loaded is what Install did on one server.
type Loaded struct {
	// Addr is the server's address.
	Addr string
	// Already is true when the library was loaded before, with the same code.
	Already bool
	// Others are the other elector libraries on the server (other elector versions), when
	// FUNCTION LIST may be run.
	Others []string
}

// Install loads the library (Library) with FUNCTION LOAD where client writes: on every primary
// of a Redis Cluster (a *redis.ClusterClient), else on the server the client talks to (the
// master, for a Sentinel failover client). Replicas get it by replication. It is idempotent: a
// library of the same name that is already loaded with the same code is success (Loaded.Already);
// with other code, an error. The errors name the server and say what to grant or do.
func Install(ctx context.Context, client redis.UniversalClient) ([]Loaded, error) {
	name, text, err := Library()
	if err != nil {
		return nil, err
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []Loaded
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			l, err := installOn(ctx, c, c.Options().Addr, name, text)
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, l)
			mu.Unlock()
			return nil
		})
		sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
		return out, err
	}
	addr := ""
	if c, ok := client.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	l, err := installOn(ctx, client, addr, name, text)
	if err != nil {
		return nil, err
	}
	return []Loaded{l}, nil
}

// installOn loads the library on the server c talks to, at addr.
func installOn(ctx context.Context, c redis.Cmdable, addr, name, text string) (Loaded, error) {
	l := Loaded{Addr: addr}
	where := "on " + addr
	if addr == "" {
		where = "on Redis"
	}
	err := c.FunctionLoad(ctx, text).Err()
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "already exists") {
		return l, fmt.Errorf("FUNCTION LOAD of library %s %s: %w", name, where, explainInstall(err, "function|load"))
	}
	if err != nil {
		// Loaded before: by this version, or another library defines one of its functions.
		libs, lerr := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name, WithCode: true}).Result()
		if lerr != nil {
			return l, fmt.Errorf("library %s %s: FUNCTION LOAD says %v; reading it back with FUNCTION LIST to compare: %w",
				name, where, err, explainInstall(lerr, "function|list"))
		}
		same := false
		for _, lib := range libs {
			if lib.Name == name {
				if lib.Code != text {
					return l, fmt.Errorf("library %s %s is loaded with other code than this elector's: delete it (FUNCTION DELETE %s) and run install-functions again",
						name, where, name)
				}
				same = true
			}
		}
		if !same {
			return l, fmt.Errorf("FUNCTION LOAD of library %s %s: %w (another library defines a function of the same name; FUNCTION LIST shows which)", name, where, err)
		}
		l.Already = true
	}
	if libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "elector_*"}).Result(); err == nil {
		for _, lib := range libs {
			if lib.Name != name {
				l.Others = append(l.Others, lib.Name)
			}
		}
		sort.Strings(l.Others)
	}
	return l, nil
}

// explainInstall adds to an error of FUNCTION LOAD or LIST what to do: the ACL permission
// (perm, e.g. function|load) for a refusal, a Redis 7 for an unknown command.
func explainInstall(err error, perm string) error {
	msg := strings.ToLower(err.Error())
	switch {
	case redis.IsPermissionError(err):
		return fmt.Errorf("%w (run it as a Redis user that may: grant +%s, e.g. +function|load +function|list, or use the default user)", err, perm)
	case strings.Contains(msg, "unknown command"):
		return fmt.Errorf("%w (Redis before 7.0 has no functions: keep EVALSHA and EVAL, scripts mode auto or eval)", err)
	}
	return err
}

// Package identity holds the one rule for a replica's default identity, shared by package
// election (an empty Config.Identity) and the elector command (no --identity): $POD_NAME,
// which a pod sets from the Kubernetes downward API (metadata.name), else the host name.
//
// It owns that rule only: what an identity may contain is checked by internal/leasewire.
package identity

import "fmt"

// Source says where a default identity came from, for logs and errors.
type Source string

// The sources of a default identity.
const (
	FromPodName  Source = "$POD_NAME"
	FromHostname Source = "the host name"
)

// Default returns $POD_NAME as getenv reads it, else the host name as hostname returns it.
// The error, when neither is known, says so; callers add what to set (a field or a flag).
func Default(getenv func(string) string, hostname func() (string, error)) (string, Source, error) {
	if pod := getenv("POD_NAME"); pod != "" {
		return pod, FromPodName, nil
	}
	host, err := hostname()
	if err != nil || host == "" {
		return "", "", fmt.Errorf("$POD_NAME is empty and the host name is unknown (%v)", err)
	}
	return host, FromHostname, nil
}

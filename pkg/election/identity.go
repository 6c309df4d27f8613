package election

import (
	"fmt"
	"os"

	"github.com/elector/elector/internal/lease"
)

// defaultIdentity returns the identity a replica gets when Config.Identity (or
// GroupConfig.Identity) is empty, as the elector command does: $POD_NAME (set it from the
// Kubernetes downward API, metadata.name), else the host name.
func defaultIdentity() (string, error) {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod, nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "", fmt.Errorf("Identity is empty, $POD_NAME is unset and the host name is unknown (%v): set Identity, for example to the pod name from the downward API", err)
	}
	return host, nil
}

// resolveIdentity returns id, or defaultIdentity when id is empty, checked as a lease
// identity.
func resolveIdentity(id string) (string, error) {
	if id == "" {
		var err error
		if id, err = defaultIdentity(); err != nil {
			return "", err
		}
	}
	if err := lease.ValidateIdentity(id); err != nil {
		return "", fmt.Errorf("Identity %q %w", id, err)
	}
	return id, nil
}

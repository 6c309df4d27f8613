package election

import (
	"fmt"
	"os"
)

// DefaultIdentity returns the identity a replica gets when Config.Identity (or
// GroupConfig.Identity) is empty, as the elector command does: $POD_NAME (set it from the
// Kubernetes downward API, metadata.name), else the host name.
func DefaultIdentity() (string, error) {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod, nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "", fmt.Errorf("Identity is empty, $POD_NAME is unset and the host name is unknown (%v): set Identity, for example to the pod name from the downward API", err)
	}
	return host, nil
}

// identityOrDefault returns id, or DefaultIdentity when id is empty.
func identityOrDefault(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	return DefaultIdentity()
}

package election

import (
	"fmt"
	"os"

	"github.com/elector/elector/internal/identity"
	"github.com/elector/elector/internal/leasewire"
)

// resolveIdentity returns id, or when id is empty the default identity a replica gets, as
// the elector command does (internal/identity: $POD_NAME, else the host name), checked as a
// lease identity.
func resolveIdentity(id string) (string, error) {
	if id == "" {
		var err error
		if id, _, err = identity.Default(os.Getenv, os.Hostname); err != nil {
			return "", fmt.Errorf("Identity is empty and %w: set Identity, for example to the pod name from the downward API", err)
		}
	}
	if err := leasewire.ValidateIdentity(id); err != nil {
		return "", fmt.Errorf("Identity %q %w", id, err)
	}
	return id, nil
}

package election

import (
	"fmt"
	"os"

	"github.com/elector/elector/internal/identity"
	"github.com/elector/elector/internal/leasewire"
)

// resolveIdentity returns id, or when id is empty the default identity a replica gets, as
// the elector command does (internal/identity: $POD_NAME, else the host name), checked as a
// lease identity. field names it in errors ("Config.Identity").
func resolveIdentity(id, field string) (string, error) {
	if id == "" {
		var err error
		if id, _, err = identity.Default(os.Getenv, os.Hostname); err != nil {
			return "", fmt.Errorf("%s is empty and %w: set %s, for example to the pod name from the downward API", field, err, field)
		}
	}
	if err := leasewire.ValidateIdentity(id); err != nil {
		return "", fmt.Errorf("%s %q %w", field, id, err)
	}
	return id, nil
}

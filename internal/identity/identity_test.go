package identity

import (
	"errors"
	"testing"
)

func TestDefault(t *testing.T) {
	env := func(pod string) func(string) string {
		return func(k string) string {
			if k == "POD_NAME" {
				return pod
			}
			return ""
		}
	}
	host := func(h string, err error) func() (string, error) { return func() (string, error) { return h, err } }
	for _, tc := range []struct {
		pod, host string
		hostErr   error
		want      string
		source    Source
		fails     bool
	}{
		{pod: "pod-7", host: "node", want: "pod-7", source: FromPodName},
		{pod: "pod-7", hostErr: errors.New("no host"), want: "pod-7", source: FromPodName},
		{host: "node", want: "node", source: FromHostname},
		{hostErr: errors.New("no host"), fails: true},
		{host: "", fails: true},
	} {
		got, source, err := Default(env(tc.pod), host(tc.host, tc.hostErr))
		if tc.fails {
			if err == nil {
				t.Errorf("POD_NAME=%q host=%q,%v: Default = %q, want an error", tc.pod, tc.host, tc.hostErr, got)
			}
			continue
		}
		if err != nil || got != tc.want || source != tc.source {
			t.Errorf("POD_NAME=%q host=%q: Default = %q, %q, %v; want %q from %q", tc.pod, tc.host, got, source, err, tc.want, tc.source)
		}
	}
}

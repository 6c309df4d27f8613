package luaerr

import (
	"errors"
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	src := "-- comment\nlocal v = redis.call('GET', KEYS[1])\nredis.pcall( 'pexpire', KEYS[1], 5)\nreturn v\n"
	refused := func(line string) error {
		return errors.New("ERR The user executing the script can't run this command or subcommand script: abc, on @user_script:" + line + ".")
	}
	for _, tc := range []struct {
		err  error
		want string // "" when err must come back unchanged
	}{
		{refused("2"), "may not run GET inside the script: grant +get"},
		{refused("3"), "may not run PEXPIRE inside the script: grant +pexpire"},
		{errors.New("ERR The user executing the script can't run this command or subcommand script: elector_v_renew, on @user_function:3."),
			"may not run PEXPIRE inside the function: grant +pexpire"}, // FCALL: src is then the library's text
		{refused("4"), ""},  // no command on that line
		{refused("99"), ""}, // no such line
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value script: abc, on @user_script:2."), ""},
		{nil, ""},
	} {
		got := Explain(src, tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("Explain(%v) = %v does not wrap the error", tc.err, got)
		}
		if tc.want == "" {
			if got != tc.err {
				t.Errorf("Explain(%v) = %v, want it unchanged", tc.err, got)
			}
		} else if !strings.Contains(got.Error(), tc.want) {
			t.Errorf("Explain(%v) = %v, want it to say %q", tc.err, got, tc.want)
		}
	}
}

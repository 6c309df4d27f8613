// Package luaerr makes the errors of elector's Lua scripts say which Redis command failed.
//
// When an ACL refuses a command inside a script, Redis 7.0 answers "The user executing the
// script can't run this command or subcommand script: <sha>, on @user_script:<line>." — the
// command is not named. The line is the line of the script's source, which this process has:
// Explain reads the command from it, so that an operator can fix the ACL from the message.
//
// It owns the wording of script and transaction errors. It must not run scripts or classify
// errors for metrics (internal/redisfail does).
package luaerr

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

var (
	// lineRe finds the line of a script (EVAL) or of the function library's text (FCALL).
	lineRe = regexp.MustCompile(`@user_(script|function):(\d+)`)
	callRe = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
)

// Explain returns err wrapped with the name of the command that source (a script's, or the
// function library's text for an error inside a function) runs at the line the error points to, when Redis refused it for lack of permission, or with the advice
// to allow the keys when Redis refused the script a key; otherwise err.
func Explain(source string, err error) error {
	if err != nil && strings.Contains(err.Error(), "can't access at least one of the keys") {
		return fmt.Errorf("%w (the Redis user may not access the lease's keys: allow their key pattern, such as ~elector:* for the default --key-prefix)", err)
	}
	if err == nil || !strings.Contains(err.Error(), "can't run this command") {
		return err
	}
	m := lineRe.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(m[2])
	lines := strings.Split(source, "\n")
	if n < 1 || n > len(lines) {
		return err
	}
	c := callRe.FindStringSubmatch(lines[n-1])
	if c == nil {
		return err
	}
	cmd := strings.ToUpper(c[1])
	return fmt.Errorf("%w (the Redis user may not run %s inside the %s: grant +%s)", err, cmd, m[1], strings.ToLower(cmd))
}

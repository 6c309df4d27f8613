package lualib

import (
	"fmt"
	"strings"

	"github.com/elector/elector/internal/luaerr"
)

// Explain adds to err, an error of a call of s, what to do about it when that is known: for a
// command refused inside the script or function, which one and what to grant
// (luaerr.Explain); for a function Redis does not know, how to load the library; for EVALSHA
// or EVAL refused, the two ways out. Other errors come back unchanged. The result wraps err.
func (s *Script) Explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case refused(err, "evalsha") || refused(err, "eval"):
		return fmt.Errorf("%w (the Redis user may not run scripts, and the function library %s is not loaded or the user may not run FCALL: load it with `elector install-functions` (FUNCTION LOAD) and grant +fcall, or grant +evalsha +eval)",
			err, LibraryName())
	case refused(err, "fcall"):
		return fmt.Errorf("%w (the Redis user may not run FCALL: grant +fcall, or use EVALSHA and EVAL (scripts mode auto or eval) and grant +evalsha +eval)", err)
	case functionMissing(err) && strings.Contains(strings.ToLower(msg), "function"):
		return fmt.Errorf("%w (Redis does not know the function %s: load the library %s on every primary with `elector install-functions`, or use scripts mode auto or eval and grant +evalsha +eval)",
			err, FunctionName(s.name), LibraryName())
	case strings.Contains(msg, "@user_function:"):
		return explainFunctionLine(err)
	}
	return luaerr.Explain(s.src, err)
}

// explainFunctionLine is luaerr.Explain for an error inside a function, whose line number is
// that of the library's text.
func explainFunctionLine(err error) error {
	_, text, lerr := Library()
	if lerr != nil {
		return err
	}
	return luaerr.Explain(text, err)
}

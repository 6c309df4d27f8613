package main

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// --log-format and its values.
const (
	flagLogFormat = "log-format"
	logFormatText = "text"
	logFormatJSON = "json"
)

// setupLogging routes klog through log/slog's JSON handler for --log-format=json, with the
// verbosity of -v (klog's V(n) is slog level -n). For text it leaves klog's own format.
func setupLogging(stderr io.Writer, format string, v *pflag.Flag) error {
	switch format {
	case logFormatText:
		return nil
	case logFormatJSON:
	default:
		return fmt.Errorf("--%s: unknown format %q; allowed: %s, %s", flagLogFormat, format, logFormatText, logFormatJSON)
	}
	level := 0
	if v != nil {
		level, _ = strconv.Atoi(v.Value.String()) // klog has checked it
	}
	h := slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.Level(-level)})
	klog.SetSlogLogger(slog.New(h))
	return nil
}

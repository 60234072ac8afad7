package capi

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Logging in NCCL's style: VCCL_DEBUG=WARN prints every failure,
// VCCL_DEBUG=INFO also what a communicator does (made, destroyed,
// aborted, its GPU paths), to stderr or to VCCL_DEBUG_FILE. NCCL_DEBUG is
// read when VCCL_DEBUG is not set, so a job's existing setting works.

type level int

const (
	levelNone level = iota
	levelWarn
	levelInfo
)

var logCfg struct {
	once  sync.Once
	level level
	mu    sync.Mutex
	out   *os.File
	host  string
}

func logLevel() level {
	logCfg.once.Do(func() {
		env := processEnv()
		switch strings.ToUpper(strings.TrimSpace(env.debug)) {
		case "WARN":
			logCfg.level = levelWarn
		case "INFO", "TRACE":
			logCfg.level = levelInfo
		}
		logCfg.out = os.Stderr
		if f := env.debugFile; f != "" && logCfg.level > levelNone {
			host, _ := os.Hostname()
			f = strings.ReplaceAll(strings.ReplaceAll(f, "%h", host), "%p", fmt.Sprint(os.Getpid()))
			if fh, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
				logCfg.out = fh
			}
		}
		logCfg.host, _ = os.Hostname()
	})
	return logCfg.level
}

// logf writes one line at lvl: host:pid:tid [device] VCCL LEVEL message.
func logf(lvl level, dev int, format string, args ...any) {
	if logLevel() < lvl {
		return
	}
	name := "WARN"
	if lvl == levelInfo {
		name = "INFO"
	}
	line := fmt.Sprintf("%s:%d:%d [%d] VCCL %s %s\n", logCfg.host, os.Getpid(), gettid(), dev, name, fmt.Sprintf(format, args...))
	logCfg.mu.Lock()
	logCfg.out.WriteString(line)
	logCfg.mu.Unlock()
}

// Warn logs a failure at WARN (the C layer logs each call that fails).
func Warn(dev int, format string, args ...any) { logf(levelWarn, dev, format, args...) }

// Info logs at INFO.
func Info(dev int, format string, args ...any) { logf(levelInfo, dev, format, args...) }

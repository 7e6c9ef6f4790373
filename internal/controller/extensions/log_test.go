package extensions_test

import "go.uber.org/zap/zapcore"

func zapLevel(v int) zapcore.Level { return zapcore.Level(-v) }

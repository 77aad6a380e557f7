package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The test panic hooks are off unless the hidden flag is on the command
// line: they are absent from --help and refused in the config file.
func TestTestPanicHooksFlag(t *testing.T) {
	var o options
	if err := o.parse(nil); err != nil || o.testPanicHooks {
		t.Fatalf("default: %v %v", err, o.testPanicHooks)
	}
	if strings.Contains(o.flags().FlagUsages(), "test-panic-hooks") {
		t.Error("--test-panic-hooks shows in --help")
	}
	o = options{}
	if err := o.parse([]string{"--test-panic-hooks"}); err != nil || !o.testPanicHooks {
		t.Fatalf("flag: %v %v", err, o.testPanicHooks)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("test-panic-hooks: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o = options{}
	if err := o.parse([]string{"--config", cfg}); err == nil || o.testPanicHooks {
		t.Fatalf("config file: err %v, hooks %v; want refused", err, o.testPanicHooks)
	}
}

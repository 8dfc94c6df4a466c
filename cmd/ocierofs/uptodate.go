package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

// A twin record says which image a conversion made: the source's digest,
// the target and every flag that shapes the output, hashed into a file
// name, hold the twin's digest. convert run again finds the record, sees
// the target still holds that digest, and says "up to date" instead of
// converting every layer again. The records are local (the user's cache
// directory): the images are left as they are.

// notOutput are convert's flags that do not shape the converted image;
// every other flag is part of a record's key, so that a new flag counts
// until it is listed here.
var notOutput = []string{"jobs", "workers", "username", "password", "password-stdin", "authfile", "src-creds", "dest-creds",
	"plain-http", "insecure", "output", "quiet", "tmpdir", "max-layer-size", "stall-timeout", "force", "suffix"}

// twinRecordPath is the file of the record of converting source (a
// manifest or index digest) into target with c's flags, or "" without a
// cache directory.
func twinRecordPath(c *cli.Context, source, target string) string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	var key strings.Builder
	fmt.Fprintf(&key, "%s\n%s\n%s\n", version.String(), source, target)
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !slices.Contains(notOutput, name) {
			fmt.Fprintf(&key, "%s=%v\n", name, c.Value(name))
		}
		if name == "prefetch-list" && c.String(name) != "" {
			// The list's content shapes the image, not its name.
			raw, err := os.ReadFile(c.String(name))
			if err != nil {
				return ""
			}
			fmt.Fprintf(&key, "prefetch-list-sha256=%x\n", sha256.Sum256(raw))
		}
	}
	sum := sha256.Sum256([]byte(key.String()))
	return filepath.Join(dir, "ocierofs", "twins", hex.EncodeToString(sum[:]))
}

// readTwinRecord is the digest the record at path holds, or "".
func readTwinRecord(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// writeTwinRecord records digest at path; a record that cannot be
// written only costs the next run its shortcut.
func writeTwinRecord(path, digest string) {
	if path == "" {
		return
	}
	if os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		os.WriteFile(path, []byte(digest+"\n"), 0o644)
	}
}

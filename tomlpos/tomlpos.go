// Package tomlpos finds where a key is in a TOML file, for error messages
// that name the line of a field the decoder accepted but a check refused.
package tomlpos

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Line returns the 1-based line of key path k in src. A path through an
// array of tables is given as (table, index, key), e.g. ("job", "2",
// "bs"); a path of a table alone gives the table's header. When the key
// is not found, the line of its table (or 1).
func Line(src string, k toml.Key) int {
	lines := strings.Split(src, "\n")
	from, table, idx := 0, "", -1
	rest := []string(k)
	if len(k) >= 2 {
		if i, err := strconv.Atoi(k[1]); err == nil {
			table, idx, rest = k[0], i, k[2:]
		} else {
			table, rest = k[0], k[1:]
		}
	}
	if table != "" {
		seen := -1
		hdr := regexp.MustCompile(`^\s*\[\[?\s*` + regexp.QuoteMeta(table) + `\s*\]\]?\s*(#.*)?$`)
		for i, l := range lines {
			if hdr.MatchString(l) {
				seen++
				if idx < 0 || seen == idx {
					from = i
					break
				}
			}
		}
	}
	if len(rest) == 0 {
		return from + 1
	}
	key := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(rest[len(rest)-1]) + `"?\s*=`)
	for i := from; i < len(lines); i++ {
		if key.MatchString(lines[i]) {
			return i + 1
		}
	}
	return from + 1
}

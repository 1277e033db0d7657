package group

import (
	"fmt"
	"strings"
)

// Default is the group of callers that match no rule.
const Default = "default"

// ValidName reports whether name is a well-formed group name: components of
// A-Z a-z 0-9 . _ - separated by single slashes, none of them "." or "..".
func ValidName(name string) error {
	if name == "" {
		return fmt.Errorf("empty group name")
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("bad group name %q: must not start or end with '/'", name)
	}
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "":
			return fmt.Errorf("bad group name %q: empty component (\"//\")", name)
		case ".", "..":
			return fmt.Errorf("bad group name %q: component %q is not allowed", name, c)
		}
		for _, r := range c {
			if !nameChar(r) {
				return fmt.Errorf("bad group name %q: character %q is not allowed; use letters, digits, '.', '_' and '-', with '/' between components", name, r)
			}
		}
	}
	return nil
}

func nameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '.' || r == '_' || r == '-'
}

// Parent returns the name of the group above name, or "" for a top-level
// group: Parent("tenants/a/build") is "tenants/a".
func Parent(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

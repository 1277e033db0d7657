package group

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// sizeUnits are the units ParseSize accepts, by exact spelling.
var sizeUnits = map[string]int64{
	"":    1,
	"B":   1,
	"k":   1 << 10,
	"K":   1 << 10,
	"KiB": 1 << 10,
	"M":   1 << 20,
	"MiB": 1 << 20,
	"G":   1 << 30,
	"GiB": 1 << 30,
	"T":   1 << 40,
	"TiB": 1 << 40,
	"kB":  1e3,
	"MB":  1e6,
	"GB":  1e9,
	"TB":  1e12,
}

// countUnits are the units accepted for riops and wiops.
var countUnits = map[string]int64{
	"":  1,
	"k": 1e3,
	"K": 1e3,
	"M": 1e6,
	"G": 1e9,
}

const (
	wantSize  = "want a number with an optional unit (B, k, K, M, G, T, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
	wantCount = "want a whole number with an optional unit (k = 1000, M = 10^6, G = 10^9)"
)

// numError is why a size or count did not parse. syntax is set when the text
// is not a number with a known unit, so that callers can add the other
// spellings they accept.
type numError struct {
	reason string
	syntax bool
}

// ParseSize returns the number of bytes s denotes: "128KiB" is 131072,
// "1.5k" is 1536, "10MB" is 10000000 and "0" is 0. See the package
// documentation for the units. Surrounding white space is ignored. Zero is
// accepted; callers for which zero makes no sense reject it themselves.
func ParseSize(s string) (int64, error) {
	n, e := parseNumber(strings.TrimSpace(s), sizeUnits, false, wantSize)
	if e != nil {
		if s == "" {
			return 0, fmt.Errorf("empty size: %s", e.reason)
		}
		return 0, fmt.Errorf("bad size %q: %s", s, e.reason)
	}
	return n, nil
}

// FormatSize returns n in the largest binary unit that divides it exactly
// ("128KiB", "10MiB", "3GiB"), or as plain bytes when none does ("1000",
// "0", "-5"). ParseSize(FormatSize(n)) == n for every n >= 0.
func FormatSize(n int64) string {
	if n > 0 {
		for _, u := range []struct {
			name string
			size int64
		}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseNumber reads DIGITS[.DIGITS]UNIT, scales it by the unit and rounds it
// to the nearest whole number (or, with whole set, requires it to be whole).
func parseNumber(s string, units map[string]int64, whole bool, want string) (int64, *numError) {
	if strings.HasPrefix(s, "-") {
		if _, e := parseNumber(s[1:], units, whole, want); e == nil {
			return 0, &numError{reason: "must not be negative"}
		}
		return 0, &numError{reason: want, syntax: true}
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[:i]
	fracPart := ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		fracPart = s[i+1 : j]
		if fracPart == "" {
			return 0, &numError{reason: want, syntax: true}
		}
		i = j
	}
	unit, ok := units[s[i:]]
	if intPart == "" || !ok {
		return 0, &numError{reason: want, syntax: true}
	}

	num, _ := new(big.Int).SetString(intPart+fracPart, 10)
	num.Mul(num, big.NewInt(unit))
	den := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(fracPart))), nil)
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Sign() != 0 {
		if whole {
			return 0, &numError{reason: "not a whole number; " + want, syntax: true}
		}
		if r.Lsh(r, 1).Cmp(den) >= 0 {
			q.Add(q, big.NewInt(1))
		}
		if q.Sign() == 0 {
			return 0, &numError{reason: "rounds to 0 bytes"}
		}
	}
	if !q.IsInt64() {
		return 0, &numError{reason: fmt.Sprintf("larger than the maximum, %d", int64(math.MaxInt64))}
	}
	return q.Int64(), nil
}

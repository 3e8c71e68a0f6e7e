package sdk

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHolderBytes is the longest holder identity accepted in a fencing token.
const MaxHolderBytes = 253

// Token is a fencing token: one leader's term. With leader election on,
// every mutation carries the Lease's term (its leaseTransitions when this
// holder acquired it) and holder identity. A provider whose cloud offers
// conditional writes or tags records the newest token per cluster (or on
// the resource) and refuses a write carrying an older one with NotLeader.
type Token struct {
	// Term is the Lease's leaseTransitions when its holder acquired it.
	Term uint64
	// Holder is the Lease's holderIdentity.
	Holder string
}

// ParseToken parses the metadata value "<term>:<holder>".
func ParseToken(value string) (Token, error) {
	term, holder, ok := strings.Cut(value, ":")
	if !ok {
		return Token{}, fmt.Errorf("%q is not <term>:<holder>", value)
	}
	// ParseUint in base 10 takes decimal digits only: no sign, no "_", no
	// empty term.
	t, err := strconv.ParseUint(term, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("term %q is not a decimal number", term)
	}
	if holder == "" {
		return Token{}, fmt.Errorf("the holder identity is empty")
	}
	if len(holder) > MaxHolderBytes {
		return Token{}, fmt.Errorf("the holder identity is %d bytes, more than %d", len(holder), MaxHolderBytes)
	}
	return Token{Term: t, Holder: holder}, nil
}

// String is the metadata form, "<term>:<holder>".
func (t Token) String() string { return strconv.FormatUint(t.Term, 10) + ":" + t.Holder }

// SupersededBy reports whether a provider that has seen newest must refuse
// a write carrying t: an older term, or the same term from another holder.
func (t Token) SupersededBy(newest Token) bool {
	switch {
	case t.Term < newest.Term:
		return true
	case t.Term == newest.Term:
		return t.Holder != newest.Holder
	default:
		return false
	}
}

// NewestToken is the high-water mark after arriving: seen (nil when none)
// is replaced only by a strictly greater term.
func NewestToken(seen *Token, arriving Token) Token {
	if seen != nil && seen.Term >= arriving.Term {
		return *seen
	}
	return arriving
}

package sdk

import (
	"strings"
	"testing"
)

func TestTokensRoundTripAndMalformedOnesAreRefused(t *testing.T) {
	tok := Token{Term: 7, Holder: "cp-1_0a1b:extra"}
	if tok.String() != "7:cp-1_0a1b:extra" {
		t.Errorf("String() = %q", tok.String())
	}
	if back, err := ParseToken(tok.String()); err != nil || back != tok {
		t.Errorf("ParseToken = %v, %v", back, err)
	}
	for _, bad := range []string{"", "7", "x:me", "-1:me", "+1:me", "7:", ":me", "1_0:me", "0x1:me", " 1:me", "99999999999999999999:me", "1:" + strings.Repeat("h", 254)} {
		if _, err := ParseToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestOlderTermsAndSameTermStrangersAreSuperseded(t *testing.T) {
	newest := Token{5, "b"}
	for _, c := range []struct {
		tok  Token
		want bool
	}{
		{Token{4, "b"}, true},
		{Token{4, "a"}, true},
		{Token{5, "a"}, true},
		{Token{5, "b"}, false},
		{Token{6, "a"}, false},
	} {
		if got := c.tok.SupersededBy(newest); got != c.want {
			t.Errorf("%v.SupersededBy(%v) = %v", c.tok, newest, got)
		}
	}
}

func TestTheHighWaterMarkOnlyRises(t *testing.T) {
	a := Token{3, "a"}
	if NewestToken(nil, a) != a {
		t.Error("first token not taken")
	}
	if NewestToken(&a, Token{2, "b"}) != a {
		t.Error("older term taken")
	}
	if NewestToken(&a, Token{3, "c"}) != a {
		t.Error("same term replaced the first holder seen")
	}
	if d := (Token{4, "d"}); NewestToken(&a, d) != d {
		t.Error("newer term not taken")
	}
}

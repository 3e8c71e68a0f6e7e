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

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "0af7651916cd43dd8448eb211c80319c"},
		{" 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 ", "0af7651916cd43dd8448eb211c80319c"},
		{"", ""},
		{"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ""},
		{"00-00000000000000000000000000000000-b7ad6b7169203331-01", ""},
		{"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", ""},
		{"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", ""},
		{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", ""},
		{"00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01", ""},
	} {
		if got := parseTraceparent(tc.in); got != tc.want {
			t.Errorf("parseTraceparent(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

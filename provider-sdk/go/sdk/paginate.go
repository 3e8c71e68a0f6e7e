package sdk

import (
	"encoding/hex"
	"sort"
	"strings"
	"unicode/utf8"
)

const (
	// DefaultPageSize is the page size when a request says 0.
	DefaultPageSize = 500
	// MaxPageSize is the largest page served, whatever the request asks.
	MaxPageSize = 5000
	tokenPrefix = "k1."
)

// Page is keyset pagination for list RPCs: given the whole list, it sorts
// it by key (unique per entry) and returns the page after pageToken and the
// token of the next page (empty on the last). Every entry that exists for
// the whole listing appears exactly once, even when entries are added or
// removed between pages. The tokens are those of the Rust SDK. A malformed
// page_size or page_token is the violation CheckPageRequest gives.
func Page[T any](all []T, key func(T) string, pageSize int32, pageToken string) ([]T, string, *Violation) {
	size, after, hasAfter, v := pageRequest(pageSize, pageToken)
	if v != nil {
		return nil, "", v
	}
	sorted := append([]T(nil), all...)
	sort.SliceStable(sorted, func(i, j int) bool { return key(sorted[i]) < key(sorted[j]) })
	start := 0
	if hasAfter {
		start = sort.Search(len(sorted), func(i int) bool { return key(sorted[i]) > after })
	}
	rest := sorted[start:]
	if len(rest) <= size {
		return rest, "", nil
	}
	rest = rest[:size]
	return rest, tokenPrefix + hex.EncodeToString([]byte(key(rest[len(rest)-1]))), nil
}

// CheckPageRequest checks a list request's page_size and page_token as Page
// does. A handler whose listing is costly calls it first, so a malformed
// request is refused before the listing.
func CheckPageRequest(pageSize int32, pageToken string) *Violation {
	_, _, _, v := pageRequest(pageSize, pageToken)
	return v
}

// pageRequest is the page size to serve and the key to start after.
func pageRequest(pageSize int32, pageToken string) (size int, after string, hasAfter bool, v *Violation) {
	if pageSize < 0 {
		return 0, "", false, violation("page_size", "%d is negative", pageSize)
	}
	size = int(pageSize)
	if size == 0 {
		size = DefaultPageSize
	}
	size = min(size, MaxPageSize)
	if pageToken == "" {
		return size, "", false, nil
	}
	after, ok := decodeToken(pageToken)
	if !ok {
		return 0, "", false, violation("page_token", "not a token this provider issued")
	}
	return size, after, true, nil
}

func decodeToken(token string) (string, bool) {
	h, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", false
	}
	b, err := hex.DecodeString(h)
	if err != nil || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

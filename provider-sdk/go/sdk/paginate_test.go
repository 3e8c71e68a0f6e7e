package sdk

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
)

func id(s string) string { return s }

func TestPagesCoverEveryEntryOnce(t *testing.T) {
	var all []string
	for i := range 1234 {
		all = append(all, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	var seen []string
	token := ""
	for {
		page, next, v := Page(all, id, 100, token)
		if v != nil {
			t.Fatal(v)
		}
		if len(page) > 100 {
			t.Fatalf("page of %d", len(page))
		}
		seen = append(seen, page...)
		if next == "" {
			break
		}
		token = next
	}
	want := slices.Clone(all)
	slices.Sort(want)
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("saw %d entries, want %d", len(seen), len(want))
	}
}

func TestEntriesRemovedBetweenPagesDoNotShiftTheRest(t *testing.T) {
	var all []string
	for i := range 10 {
		all = append(all, fmt.Sprintf("k%d", i))
	}
	first, token, _ := Page(all, id, 4, "")
	if !reflect.DeepEqual(first, []string{"k0", "k1", "k2", "k3"}) {
		t.Errorf("first = %v", first)
	}
	// The Rust SDK's token for the same key.
	if token != "k1.6b33" {
		t.Errorf("token = %q", token)
	}
	fewer := slices.DeleteFunc(slices.Clone(all), func(k string) bool { return k == "k1" || k == "k5" })
	second, _, _ := Page(fewer, id, 4, token)
	if !reflect.DeepEqual(second, []string{"k4", "k6", "k7", "k8"}) {
		t.Errorf("second = %v", second)
	}
}

func TestSizesAndBadTokens(t *testing.T) {
	if _, _, v := Page([]string{"a"}, id, 1, "garbage"); v == nil || v.Field != "page_token" {
		t.Errorf("garbage token: %v", v)
	}
	if _, _, v := Page([]string{"a"}, id, 1, "k1.zz"); v == nil || v.Field != "page_token" {
		t.Errorf("bad hex: %v", v)
	}
	if _, _, v := Page([]string{"a"}, id, -1, ""); v == nil || v.Field != "page_size" {
		t.Errorf("negative size: %v", v)
	}
	// CheckPageRequest gives the same violations, without a list.
	for _, c := range []struct {
		size  int32
		token string
		field string
	}{
		{1, "garbage", "page_token"},
		{1, "k1.zz", "page_token"},
		{-1, "", "page_size"},
		{-1, "garbage", "page_size"},
		{0, "", ""},
		{1, "k1.6b33", ""},
	} {
		_, _, want := Page([]string{"a"}, id, c.size, c.token)
		v := CheckPageRequest(c.size, c.token)
		if c.field == "" && (v != nil || want != nil) || c.field != "" && (v == nil || v.Field != c.field || *v != *want) {
			t.Errorf("CheckPageRequest(%d, %q) = %v, Page's %v, want field %q", c.size, c.token, v, want, c.field)
		}
	}
	many := make([]string, 6000)
	for i := range many {
		many[i] = fmt.Sprintf("%05d", i)
	}
	if page, _, _ := Page(many, id, 0, ""); len(page) != DefaultPageSize {
		t.Errorf("default page of %d", len(page))
	}
	if page, _, _ := Page(many, id, 100000, ""); len(page) != MaxPageSize {
		t.Errorf("largest page of %d", len(page))
	}
}

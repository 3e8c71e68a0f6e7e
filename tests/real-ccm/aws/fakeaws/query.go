package fakeaws

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// params are the form values of one AWS query request (EC2 or ELB).
type params url.Values

func (p params) get(key string) string { return url.Values(p).Get(key) }

// list is the values of prefix.1, prefix.2, … (EC2 flat lists; for ELB the
// caller passes "Name.member").
func (p params) list(prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := p[fmt.Sprintf("%s.%d", prefix, i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// indexes are the N of every key prefix.N or prefix.N.… present, sorted.
func (p params) indexes(prefix string) []int {
	seen := map[int]bool{}
	for k := range p {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(n); err == nil {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// sub is the parameters under prefix.N., with that prefix removed.
func (p params) sub(prefix string, n int) params {
	pre := fmt.Sprintf("%s.%d.", prefix, n)
	out := params{}
	for k, v := range p {
		if rest, ok := strings.CutPrefix(k, pre); ok {
			out[rest] = v
		}
	}
	return out
}

// under is the parameters under prefix., with that prefix removed.
func (p params) under(prefix string) params {
	out := params{}
	for k, v := range p {
		if rest, ok := strings.CutPrefix(k, prefix+"."); ok {
			out[rest] = v
		}
	}
	return out
}

func (p params) int32ptr(key string) (*int32, *apiError) {
	v := p.get(key)
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return nil, &apiError{Code: "InvalidParameterValue", Message: fmt.Sprintf("%s: %q is not a number", key, v)}
	}
	i := int32(n)
	return &i, nil
}

// tags reads prefix.N.Key / prefix.N.Value.
func (p params) tags(prefix string) map[string]string {
	out := map[string]string{}
	for _, i := range p.indexes(prefix) {
		t := p.sub(prefix, i)
		out[t.get("Key")] = t.get("Value")
	}
	return out
}

// node is an XML element: text or children.
type node struct {
	name  string
	attrs string // ` xmlns="…"`, written as is
	text  string
	kids  []node
}

func el(name string, kids ...node) node { return node{name: name, kids: kids} }
func tx(name, text string) node         { return node{name: name, text: text} }

func (n node) write(b *strings.Builder) {
	b.WriteString("<" + n.name + n.attrs + ">")
	if n.kids == nil {
		escape(b, n.text)
	}
	for _, k := range n.kids {
		k.write(b)
	}
	b.WriteString("</" + n.name + ">")
}

func escape(b *strings.Builder, s string) {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "\"", "&quot;", "'", "&apos;")
	b.WriteString(r.Replace(s))
}

// items wraps each of kids in an element called item (EC2) or member (ELB).
func items(wrapper, item string, kids []node) node {
	w := node{name: wrapper, kids: []node{}}
	for _, k := range kids {
		k.name = item
		w.kids = append(w.kids, k)
	}
	return w
}

func tagNodes(wrapper, item string, tags map[string]string) node {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var kids []node
	for _, k := range keys {
		kids = append(kids, el("", tx(keyName(item), k), tx(valueName(item), tags[k])))
	}
	return items(wrapper, item, kids)
}

// EC2 spells tag fields key/value, ELB Key/Value.
func keyName(item string) string {
	if item == "item" {
		return "key"
	}
	return "Key"
}

func valueName(item string) string {
	if item == "item" {
		return "value"
	}
	return "Value"
}

func i32(n *int32) string {
	if n == nil {
		return ""
	}
	return strconv.Itoa(int(*n))
}

// apiError is an AWS error answer: its code, message and HTTP status.
type apiError struct {
	Code    string
	Message string
	Status  int
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func notFound(code, format string, a ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, a...)}
}

func invalid(format string, a ...any) *apiError {
	return &apiError{Code: "InvalidParameterValue", Message: fmt.Sprintf(format, a...)}
}

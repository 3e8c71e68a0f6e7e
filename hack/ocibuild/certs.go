package main

import (
	"bytes"
	"encoding/pem"
	"errors"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// caBundle is the PEM file of Mozilla's roots as golang.org/x/crypto's
// x509roots/fallback/bundle ships them (pinned by go.sum, so every machine
// writes the same bytes; the host's /etc/ssl would differ between
// machines). Roots Mozilla only trusts with a constraint (e.g. distrust
// after a date) are left out: a PEM file cannot carry the constraint.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	if buf.Len() == 0 {
		return nil, errors.New("the CA bundle is empty")
	}
	return buf.Bytes(), nil
}

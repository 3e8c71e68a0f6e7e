//! Provider conformance suite: being written.

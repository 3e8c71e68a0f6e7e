//! In-memory fake cloud: being written.

//! The state file ([`crate::FakeConfig::state_file`]): the cloud as JSON in a
//! versioned envelope, rewritten atomically (temporary file in the same
//! directory, fsync, rename, fsync of the directory) after every change, so
//! a fake killed at any moment leaves either the old or the new cloud.
//!
//! ```json
//! {"format": "ccm-fake-provider-state", "version": 1,
//!  "cloud": {"instances": [...], "removed": [...], "next_address": 2,
//!            "load_balancers": [...], "routes": [...], "leaders": [...]}}
//! ```

use std::path::PathBuf;

use ccm_provider_sdk::state_file::write_atomically;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::state::{FakeConfig, Persisted, State};

/// The `format` every state file carries.
pub const FORMAT: &str = "ccm-fake-provider-state";
/// The envelope version this fake writes and reads.
pub const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    format: String,
    version: u32,
    cloud: Persisted,
}

/// Where the cloud is kept.
#[derive(Debug)]
pub(crate) struct StateFile {
    path: PathBuf,
}

impl StateFile {
    fn error(&self, reason: impl std::fmt::Display) -> Error {
        Error::StateFile {
            path: self.path.display().to_string(),
            reason: reason.to_string(),
        }
    }

    /// Opens the cloud kept at `path`: loads it when the file exists, else
    /// starts one from `config` and writes it at once, so an unusable path
    /// fails at start rather than at the first change.
    pub(crate) fn open(path: PathBuf, config: FakeConfig) -> Result<(Self, State), Error> {
        let file = StateFile { path };
        match std::fs::read(&file.path) {
            Ok(bytes) => {
                let saved = parse(&bytes).map_err(|e| file.error(e))?;
                let state = State::restore(config, saved).map_err(|e| file.error(e))?;
                Ok((file, state))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let state = State::new(config)?;
                file.save(&state)?;
                Ok((file, state))
            }
            Err(e) => Err(file.error(e)),
        }
    }

    /// Writes the cloud atomically.
    pub(crate) fn save(&self, state: &State) -> Result<(), Error> {
        let envelope = Envelope {
            format: FORMAT.to_owned(),
            version: VERSION,
            cloud: state.persisted(),
        };
        let mut bytes = serde_json::to_vec_pretty(&envelope).map_err(|e| self.error(e))?;
        bytes.push(b'\n');
        write_atomically(&self.path, &bytes).map_err(|e| self.error(e))
    }
}

/// A file this fake did not write (or a later version wrote) is refused with
/// the reason; it is never taken for an empty cloud.
fn parse(bytes: &[u8]) -> Result<Persisted, String> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let format = value.get("format").and_then(|f| f.as_str());
    if format != Some(FORMAT) {
        return Err(format!(
            "not a fake-provider state file (\"format\" is {}, expected {FORMAT:?})",
            value
                .get("format")
                .map_or("missing".to_owned(), |f| f.to_string())
        ));
    }
    match value.get("version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(VERSION) => {}
        Some(v) => {
            return Err(format!(
                "version {v} is not supported (this fake reads {VERSION})"
            ));
        }
        None => return Err("\"version\" is missing or not a number".to_owned()),
    }
    let envelope: Envelope =
        serde_json::from_value(value).map_err(|e| format!("invalid contents: {e}"))?;
    Ok(envelope.cloud)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_it_did_not_write() {
        let cases = [
            (&b"{\"format\": \"ccm-fake-provider-st"[..], "not JSON"),
            (b"[]", "not a fake-provider state file"),
            (b"{\"format\": \"other\"}", "not a fake-provider state file"),
            (
                b"{\"format\": \"ccm-fake-provider-state\", \"version\": 2, \"cloud\": {}}",
                "version 2 is not supported",
            ),
            (
                b"{\"format\": \"ccm-fake-provider-state\", \"cloud\": {}}",
                "\"version\" is missing",
            ),
            (
                b"{\"format\": \"ccm-fake-provider-state\", \"version\": 1, \"cloud\": {}}",
                "invalid contents: missing field `instances`",
            ),
        ];
        for (bytes, want) in cases {
            let err = parse(bytes).unwrap_err();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    #[test]
    fn a_missing_file_starts_a_cloud_and_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.json");
        let (_, state) = StateFile::open(path.clone(), FakeConfig::default()).unwrap();
        assert!(state.persisted().instances.is_empty());
        let saved = parse(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(saved, state.persisted());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["cloud.json"], "no temporary file is left behind");
    }

    #[test]
    fn an_unwritable_path_fails_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir").join("cloud.json");
        let err = StateFile::open(path.clone(), FakeConfig::default()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("state file {}: ", path.display())),
            "{err}"
        );
    }
}

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

use ccm_provider_sdk::state_file::Envelope;

use crate::Error;
use crate::state::{FakeConfig, State};

/// The state file's envelope: its `format`, the version this fake writes
/// and reads, and the key the cloud is under.
pub const ENVELOPE: Envelope = Envelope {
    format: "ccm-fake-provider-state",
    version: 1,
    payload: "cloud",
    writer: "fake-provider",
};

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
        match ENVELOPE.read(&file.path).map_err(|e| file.error(e))? {
            Some(saved) => {
                let state = State::restore(config, saved).map_err(|e| file.error(e))?;
                Ok((file, state))
            }
            None => {
                let state = State::new(config)?;
                file.save(&state)?;
                Ok((file, state))
            }
        }
    }

    /// Writes the cloud atomically.
    pub(crate) fn save(&self, state: &State) -> Result<(), Error> {
        ENVELOPE
            .write(&self.path, &state.persisted())
            .map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use ccm_provider_sdk::state_file::StateFileError;

    use super::*;
    use crate::state::Persisted;

    fn parse(bytes: &[u8]) -> Result<Persisted, StateFileError> {
        ENVELOPE.decode(bytes)
    }

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
            let err = parse(bytes).unwrap_err().to_string();
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

//! Keeping a provider's own state on disk so a restart (even after SIGKILL)
//! finds the same cloud: what a local or fake provider needs, and what a
//! real one needs for anything its cloud does not record.
//!
//! The file is JSON in a versioned envelope, rewritten atomically:
//!
//! ```json
//! {"format": "ccm-fake-provider-state", "version": 1, "cloud": {...}}
//! ```
//!
//! A file the provider did not write, or a later version wrote, is refused
//! with the reason; it is never taken for an empty cloud (which would leak
//! everything it described).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// The shape of one provider's state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// The `format` every file carries, e.g. `"ccm-fake-provider-state"`.
    pub format: &'static str,
    /// The version this provider writes and reads.
    pub version: u32,
    /// The key the state itself is under, e.g. `"cloud"`.
    pub payload: &'static str,
    /// Who writes it, for messages: `"fake-provider"` gives "not a
    /// fake-provider state file".
    pub writer: &'static str,
}

/// Why a state file was refused or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not a {writer} state file (\"format\" is {found}, expected {expected:?})")]
    Format {
        writer: &'static str,
        /// The `format` found, as JSON, or "missing".
        found: String,
        expected: &'static str,
    },
    #[error("version {found} is not supported (this provider reads {supported})")]
    Version { found: u64, supported: u32 },
    #[error("\"version\" is missing or not a number")]
    NoVersion,
    #[error("invalid contents: {0}")]
    Contents(String),
    #[error("cannot encode the state: {0}")]
    Encode(#[source] serde_json::Error),
}

impl Envelope {
    /// The state in its envelope, pretty-printed, ending in a newline.
    pub fn encode<T: Serialize>(&self, state: &T) -> Result<Vec<u8>, StateFileError> {
        let mut bytes =
            serde_json::to_vec_pretty(&Wrapped(self, state)).map_err(StateFileError::Encode)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// The state out of its envelope: the format and version are checked
    /// before the contents, so that a file of another writer or version is
    /// refused for that reason and not for its contents.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, StateFileError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(StateFileError::NotJson)?;
        let format = value.get("format");
        if format.and_then(|f| f.as_str()) != Some(self.format) {
            return Err(StateFileError::Format {
                writer: self.writer,
                found: format.map_or("missing".to_owned(), |f| f.to_string()),
                expected: self.format,
            });
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(self.version) => {}
            Some(found) => {
                return Err(StateFileError::Version {
                    found,
                    supported: self.version,
                });
            }
            None => return Err(StateFileError::NoVersion),
        }
        let serde_json::Value::Object(mut fields) = value else {
            unreachable!("a value with a \"format\" is an object");
        };
        let contents = |e: String| StateFileError::Contents(e);
        let state = fields
            .remove(self.payload)
            .ok_or_else(|| contents(format!("missing field `{}`", self.payload)))?;
        if let Some(unknown) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "format" | "version"))
        {
            return Err(contents(format!("unknown field `{unknown}`")));
        }
        serde_json::from_value(state).map_err(|e| contents(e.to_string()))
    }

    /// What the file at `path` holds; `None` when there is no file.
    pub fn read<T: DeserializeOwned>(&self, path: &Path) -> Result<Option<T>, StateFileError> {
        match std::fs::read(path) {
            Ok(bytes) => self.decode(&bytes).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the file at `path` atomically ([`write_atomically`]).
    pub fn write<T: Serialize>(&self, path: &Path, state: &T) -> Result<(), StateFileError> {
        Ok(write_atomically(path, &self.encode(state)?)?)
    }
}

/// The envelope's fields in the order a reader expects them: format and
/// version first.
struct Wrapped<'a, T>(&'a Envelope, &'a T);

impl<T: Serialize> Serialize for Wrapped<'_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("format", self.0.format)?;
        map.serialize_entry("version", &self.0.version)?;
        map.serialize_entry(self.0.payload, self.1)?;
        map.end()
    }
}

/// Replaces `path` with `bytes` so that a crash at any moment leaves either
/// the old or the new contents: a temporary file in the same directory,
/// fsync, rename over `path`, fsync of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    // The rename itself must reach the disk too.
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    const TEST: Envelope = Envelope {
        format: "ccm-test-provider-state",
        version: 1,
        payload: "cloud",
        writer: "test-provider",
    };

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cloud {
        instances: Vec<String>,
    }

    #[test]
    fn round_trips_with_format_and_version_first() {
        let cloud = Cloud {
            instances: vec!["n1".into()],
        };
        let bytes = TEST.encode(&cloud).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.ends_with("}\n"), "{text}");
        let format = text.find("\"format\"").unwrap();
        let version = text.find("\"version\"").unwrap();
        let payload = text.find("\"cloud\"").unwrap();
        assert!(format < version && version < payload, "{text}");
        assert_eq!(TEST.decode::<Cloud>(&bytes).unwrap(), cloud);
    }

    #[test]
    fn refuses_what_it_did_not_write() {
        let cases = [
            (&b"{\"format\": \"ccm-test-provider-st"[..], "not JSON"),
            (b"[]", "not a test-provider state file (\"format\" is missing"),
            (
                b"{\"format\": \"other\"}",
                "not a test-provider state file (\"format\" is \"other\", expected \"ccm-test-provider-state\")",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"version\": 2, \"cloud\": {}}",
                "version 2 is not supported (this provider reads 1)",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"cloud\": {}}",
                "\"version\" is missing",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"version\": \"1\", \"cloud\": {}}",
                "\"version\" is missing or not a number",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"version\": 1}",
                "invalid contents: missing field `cloud`",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"version\": 1, \"cloud\": {}}",
                "invalid contents: missing field `instances`",
            ),
            (
                b"{\"format\": \"ccm-test-provider-state\", \"version\": 1, \"cloud\": {\"instances\": []}, \"extra\": 1}",
                "invalid contents: unknown field `extra`",
            ),
        ];
        for (bytes, want) in cases {
            let err = TEST.decode::<Cloud>(bytes).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    #[test]
    fn a_missing_file_reads_as_none_and_a_written_one_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.json");
        assert_eq!(TEST.read::<Cloud>(&path).unwrap(), None);
        let cloud = Cloud {
            instances: vec!["n1".into(), "n2".into()],
        };
        TEST.write(&path, &cloud).unwrap();
        assert_eq!(TEST.read::<Cloud>(&path).unwrap(), Some(cloud));
        let missing_dir = dir.path().join("no-such-dir").join("cloud.json");
        assert!(matches!(
            TEST.write(&missing_dir, &Cloud { instances: vec![] }),
            Err(StateFileError::Io(_))
        ));
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = std::env::temp_dir().join(format!("ccm-sdk-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

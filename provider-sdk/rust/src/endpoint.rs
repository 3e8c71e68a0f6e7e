//! The Unix socket both sides meet on: parsing `unix://` endpoints, binding
//! the provider's socket, and the permission check the client makes before
//! it connects. Client and server depend on this module, never on each
//! other.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Why an endpoint could not be served (or, for [`socket_path`], parsed).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("socket {0} is in use by a running server")]
    InUse(PathBuf),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Parses `unix:///abs/path` (or `unix:/abs/path`) into a path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, ServeError> {
    let bad = |reason: &str| ServeError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .ok_or_else(|| bad("only unix:///absolute/path endpoints are supported"))?;
    if !rest.starts_with('/') {
        return Err(bad("the socket path must be absolute"));
    }
    Ok(PathBuf::from(rest))
}

/// A socket mode as given on a command line, in octal (`600`, `0o660`):
/// what `ProviderServer::socket_mode` takes.
pub fn parse_socket_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or_else(|| format!("{s:?} is not an octal mode such as 600"))
}

/// Binds the socket: removes a stale socket left by a dead server, refuses
/// to touch a live one or a non-socket file, and sets the permission bits.
pub async fn bind_socket(path: &Path, mode: u32) -> Result<UnixListener, ServeError> {
    let io = |source| ServeError::Socket {
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ServeError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        Ok(_) => {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket; refusing to remove it",
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    Ok(listener)
}

/// Refuses a socket that users other than the owner and group can connect
/// to: whoever can connect can drive the cloud. Connecting to a Unix socket
/// takes write permission on it, so the rule is "no write bit for others"
/// (0600, 0660, 0644 and 0755 pass; 0666 and 0602 do not). The SDKs create
/// it 0600 (or 0660).
#[cfg(feature = "client")]
pub(crate) fn check_socket_permissions(path: &Path) -> std::io::Result<()> {
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if !socket_mode_is_private(mode) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "provider socket {} can be connected to by other users (mode {mode:04o}, writable by others); create it 0600 or 0660",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// True when only the owner and group can connect: no write bit for others.
pub fn socket_mode_is_private(mode: u32) -> bool {
    mode & 0o002 == 0
}

/// A plain tonic channel to the provider socket at `path`, connected now:
/// none of [`crate::ProviderClient`]'s deadlines, metadata, limits or
/// permission checks. For tools and tests that send what the client never
/// would (a malformed token, a request without a deadline of its own), and
/// for measuring the client against bare tonic.
#[cfg(feature = "client")]
pub async fn raw_channel(
    path: impl Into<PathBuf>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.into();
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            socket_path("unix:///run/p.sock").unwrap(),
            PathBuf::from("/run/p.sock")
        );
        assert_eq!(
            socket_path("unix:/run/p.sock").unwrap(),
            PathBuf::from("/run/p.sock")
        );
        assert!(socket_path("unix://relative.sock").is_err());
        assert!(socket_path("tcp://127.0.0.1:1").is_err());
    }
}

#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// An accepted endpoint is `unix://` or `unix:` and an absolute
        /// path, which is what it names.
        #[test]
        fn endpoints_name_an_absolute_socket_path(
            endpoint in prop_oneof![
                "unix:(//)?/?[a-z./ é-]{0,12}",
                "[a-z]{0,5}:/{0,3}[a-z./]{0,8}",
                any::<String>(),
            ],
        ) {
            match socket_path(&endpoint) {
                Ok(path) => {
                    prop_assert!(path.is_absolute());
                    let p = path.to_str().unwrap();
                    let named = endpoint == format!("unix://{p}") || endpoint == format!("unix:{p}");
                    prop_assert!(named, "{:?} read as {:?}", endpoint, p);
                }
                Err(e) => prop_assert!(matches!(e, ServeError::Endpoint { .. }), "{}", e),
            }
        }
    }
}

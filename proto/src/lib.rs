//! Generated Rust types, clients and servers for the provider contract
//! `ccmrs.cloudprovider.v1`. The contract itself, with every field
//! documented, is in `proto/ccmrs/cloudprovider/v1/*.proto`; the SDK
//! (`ccm-provider-sdk`) is the friendlier way to use it.

#![allow(clippy::all, missing_docs)]

/// `ccmrs.cloudprovider.v1`.
pub mod v1 {
    tonic::include_proto!("ccmrs.cloudprovider.v1");

    /// The encoded `FileDescriptorSet` of the contract, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/descriptor.bin"));

    /// `ErrorInfo.domain` of every error of this contract.
    pub const ERROR_DOMAIN: &str = "ccmrs.cloudprovider.v1";

    /// The gRPC metadata key carrying the controller's request id.
    pub const REQUEST_ID_METADATA: &str = "x-ccm-request-id";

    /// The gRPC metadata key carrying the instant the controller gives up
    /// on a call, in milliseconds since the Unix epoch.
    pub const DEADLINE_METADATA: &str = "x-ccm-deadline";

    /// The gRPC metadata key carrying the leader's fencing token on
    /// mutations: `<term>:<holder identity>`.
    pub const FENCING_TOKEN_METADATA: &str = "x-ccm-fencing-token";

    /// The contract's semantic version, reported in `GetProviderInfo`. A
    /// rule providers MUST follow added to the contract bumps the minor
    /// version (docs/spec.md, "Changelog").
    pub const CONTRACT_VERSION: &str = "1.4.0";
}

//! Compiles the contract with protox (pure Rust, no protoc) and generates
//! tonic clients and servers, plus the encoded descriptor set for reflection.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = "ccmrs/cloudprovider/v1";
    let mut files: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".proto"))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    files.sort();
    let fds = protox::compile(&files, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed={dir}");
    Ok(())
}

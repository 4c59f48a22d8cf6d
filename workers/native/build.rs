//! Compiles `cpp/core_script.cpp` (Bitcoin Core's interpreter over a whole transaction) against
//! the Core sources the `bitcoinconsensus` crate vendors; that crate builds and links the
//! library it calls into.

use std::path::PathBuf;
use std::process::Command;

/// The `bitcoinconsensus` version pinned in Cargo.toml.
const CONSENSUS_CRATE: &str = "bitcoinconsensus-0.106.0+26.0";

fn main() {
    println!("cargo:rerun-if-changed=cpp/core_script.cpp");
    println!("cargo:rerun-if-changed=build.rs");
    let core = consensus_source().join("depend/bitcoin/src");
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("cpp/core_script.cpp")
        .include(&core)
        .include(core.join("secp256k1/include"))
        .define("__STDC_FORMAT_MACROS", None)
        .flag_if_supported("-Wno-unused-parameter")
        .compile("rechain_core_script");
}

/// Where cargo unpacked the `bitcoinconsensus` crate: asked of `cargo metadata` (which knows
/// registries, vendoring and path overrides alike).
fn consensus_source() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("Cargo.toml");
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("cargo metadata prints UTF-8");
    // The manifest path of the package whose id names the pinned version; no JSON parser in
    // the build dependencies for one field.
    let marker = "\"manifest_path\":\"";
    for package in text.split("{\"name\":\"bitcoinconsensus\"").skip(1) {
        if let Some(at) = package.find(marker) {
            let rest = &package[at + marker.len()..];
            let path = PathBuf::from(&rest[..rest.find('"').unwrap()]);
            let dir = path.parent().unwrap().to_path_buf();
            if dir.ends_with(CONSENSUS_CRATE) {
                return dir;
            }
        }
    }
    panic!("cargo metadata does not list {CONSENSUS_CRATE}");
}

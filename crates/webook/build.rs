//! Link options of the `webook` binary.
//!
//! Relative relocations are packed (`DT_RELR`, GNU ld ≥ 2.38, glibc ≥ 2.36): a position-
//! independent executable otherwise carries one 24-byte `R_X86_64_RELATIVE` entry per pointer in
//! its read-only data — ~2.5 MB of the release binary (docs/PERFORMANCE.md → Binary size).

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}

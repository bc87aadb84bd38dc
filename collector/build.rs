//! Embeds the files the collector serves from its own binary, each with its
//! brotli (quality 11) and gzip (level 9) forms made here, once, and the
//! strong ETag of every form:
//! - the browser SDK built by `scripts/build-sdk` into `sdk-wasm/dist/`: every
//!   file there (the loader `v1.js`, the content-hashed glue and wasm it loads,
//!   and the wall module the wasm loads only to show a wall);
//!   when it has not been built, the binary still builds and `/p/` says how to
//!   build it;
//! - the demo publisher site `www-demo/` (its pages are templates filled in
//!   when served, so only its other files are compressed here);
//! - the dashboard's CSS and JavaScript (`src/dashboard/assets/`);
//! - the bait request paths and the control request's path from `tests/filter-lists/bait.json` (the file the
//!   filter-list test proves), so the served bait and the SDK's cannot differ.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    // Read when the script runs, not when it is compiled: a target directory
    // copied from another checkout must not embed that checkout's files.
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("..");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut out = String::new();
    // Only the SDK's dist/ is embedded: rebuilding the SDK's package or sources
    // alone must not rebuild the collector. A path that does not exist would
    // make Cargo run this script on every build, so until dist/ exists its
    // parent is watched, where it will appear.
    let dist = root.join("sdk-wasm/dist");
    let sdk_watch = if dist.is_dir() { dist.clone() } else { root.join("sdk-wasm") };
    let demo = root.join("www-demo");
    let dashboard = root.join("collector/src/dashboard/assets");
    for watched in [&sdk_watch, &demo, &dashboard] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    let bait = root.join("tests/filter-lists/bait.json");
    println!("cargo:rerun-if-changed={}", bait.display());

    let text = std::fs::read_to_string(&bait).expect("reading tests/filter-lists/bait.json");
    let bait: serde_json::Value = serde_json::from_str(&text).expect("bait.json is JSON");
    let path = |set: &serde_json::Value| set["request_path"].as_str().expect("a request_path in bait.json").to_owned();
    let paths: Vec<String> = bait["sets"].as_array().expect("bait.json has sets").iter().map(path).collect();
    writeln!(out, "pub const BAIT_PATHS: &[&str] = &{paths:?};").unwrap();
    writeln!(out, "pub const CONTROL_PATH: &str = {:?};", path(&bait["control"])).unwrap();

    // The SDK is whole or absent: a dist/ without its loader is not served.
    let sdk = if dist.join("v1.js").is_file() { files(&dist) } else { Vec::new() };
    embed(&mut out, &out_dir, "SDK", "sdk", &sdk, |_| true);
    embed(&mut out, &out_dir, "DEMO", "demo", &files(&demo), |name| !name.ends_with(".html"));
    embed(&mut out, &out_dir, "DASHBOARD", "dashboard", &files(&dashboard), |_| true);

    std::fs::write(out_dir.join("assets.rs"), out).expect("writing assets.rs");
}

/// The files of a directory (not its subdirectories), by name.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

/// Writes `pub const NAME: &[(&str, Embedded)]`, compressing the files that
/// `compress` names into `OUT_DIR/<dir>/`.
fn embed(out: &mut String, out_dir: &Path, name: &str, dir: &str, files: &[PathBuf], compress: impl Fn(&str) -> bool) {
    let target = out_dir.join(dir);
    std::fs::create_dir_all(&target).expect("creating the compressed assets' directory");
    writeln!(out, "pub const {name}: &[(&str, Embedded)] = &[").unwrap();
    for file in files {
        let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let identity = form(&file.display().to_string(), &bytes);
        let (gzip, br) = if compress(&file_name) {
            let smaller = |coded: Vec<u8>, ext: &str| -> String {
                // A form no smaller than the file itself is never worth sending.
                if coded.len() >= bytes.len() {
                    return "None".into();
                }
                let path = target.join(format!("{file_name}.{ext}"));
                std::fs::write(&path, &coded).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
                format!("Some({})", form(&path.display().to_string(), &coded))
            };
            (smaller(gzip(&bytes), "gz"), smaller(brotli(&bytes), "br"))
        } else {
            ("None".into(), "None".into())
        };
        writeln!(out, "    ({file_name:?}, Embedded {{ identity: {identity}, gzip: {gzip}, br: {br} }}),").unwrap();
    }
    out.push_str("];\n");
}

/// One form of a file: its bytes and their strong ETag (the first 16 bytes of their SHA-256).
fn form(path: &str, bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let tag: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("Form {{ bytes: include_bytes!({path:?}), etag: \"\\\"{tag}\\\"\" }}")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

fn brotli(bytes: &[u8]) -> Vec<u8> {
    let params = brotli::enc::BrotliEncoderParams { quality: 11, lgwin: 22, ..Default::default() };
    let mut coded = Vec::new();
    brotli::BrotliCompress(&mut &bytes[..], &mut coded, &params).expect("brotli into memory");
    coded
}

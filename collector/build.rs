//! Embeds the files the collector serves from its own binary:
//! - the browser SDK built by `scripts/build-sdk` into `sdk-wasm/dist/` (the
//!   loader `v1.js` and the content-hashed glue and wasm); when it has not
//!   been built, the binary still builds and `/p/` says how to build it;
//! - the demo publisher site `www-demo/`;
//! - the bait request path from `tests/filter-lists/bait.json` (the file the
//!   filter-list test proves), so the served bait and the SDK's cannot differ.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    // Read when the script runs, not when it is compiled: a target directory
    // copied from another checkout must not embed that checkout's files.
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("..");
    let mut out = String::new();
    // Only the SDK's dist/ is embedded: rebuilding the SDK's package or sources
    // alone must not rebuild the collector. A path that does not exist would
    // make Cargo run this script on every build, so until dist/ exists its
    // parent is watched, where it will appear.
    let dist = root.join("sdk-wasm/dist");
    let sdk_watch = if dist.is_dir() { dist.clone() } else { root.join("sdk-wasm") };
    println!("cargo:rerun-if-changed={}", sdk_watch.display());
    println!("cargo:rerun-if-changed={}", root.join("www-demo").display());
    let bait = root.join("tests/filter-lists/bait.json");
    println!("cargo:rerun-if-changed={}", bait.display());

    let text = std::fs::read_to_string(&bait).expect("reading tests/filter-lists/bait.json");
    let path = text
        .split("\"request_path\"")
        .nth(1)
        .and_then(|rest| rest.split('"').nth(1))
        .expect("bait.json has a request_path");
    writeln!(out, "pub const BAIT_PATH: &str = {path:?};").unwrap();

    let named = |ext: &str| -> Option<PathBuf> {
        std::fs::read_dir(&dist).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.extension().is_some_and(|e| e == ext) && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("postern-"))
        })
    };
    match (dist.join("v1.js").is_file().then(|| dist.join("v1.js")), named("js"), named("wasm")) {
        (Some(loader), Some(glue), Some(wasm)) => {
            let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
            writeln!(
                out,
                "pub const SDK: Option<SdkFiles> = Some(SdkFiles {{ loader: include_bytes!({:?}), glue_name: {:?}, glue: include_bytes!({:?}), wasm_name: {:?}, wasm: include_bytes!({:?}) }});",
                loader.display().to_string(),
                name(&glue),
                glue.display().to_string(),
                name(&wasm),
                wasm.display().to_string()
            )
            .unwrap();
        }
        _ => out.push_str("pub const SDK: Option<SdkFiles> = None;\n"),
    }

    let demo = root.join("www-demo");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&demo)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    out.push_str("pub const DEMO: &[(&str, &[u8])] = &[\n");
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        writeln!(out, "    ({name:?}, include_bytes!({:?})),", f.display().to_string()).unwrap();
    }
    out.push_str("];\n");

    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("assets.rs");
    std::fs::write(dest, out).expect("writing assets.rs");
}

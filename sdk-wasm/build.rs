//! Reads the bait from `tests/filter-lists/bait.json`, the file the
//! filter-list test proves against real lists, so the SDK cannot use a bait
//! the proof did not cover.

use std::path::Path;

fn main() {
    // Read when the script runs, not when it is compiled (see collector/build.rs).
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = Path::new(&dir).join("../tests/filter-lists/bait.json");
    println!("cargo:rerun-if-changed={}", src.display());
    let text = std::fs::read_to_string(&src).expect("reading tests/filter-lists/bait.json");
    let bait: serde_json::Value = serde_json::from_str(&text).expect("bait.json is JSON");
    let el = &bait["element"];
    let s = |v: &serde_json::Value| v.as_str().expect("a string in bait.json").to_owned();
    let classes: Vec<String> = el["classes"].as_array().expect("element.classes").iter().map(s).collect();
    let out = format!(
        "pub const TAG: &str = {:?};\npub const CLASSES: &str = {:?};\npub const ID: &str = {:?};\n\
         pub const STYLE: &str = {:?};\npub const PATH: &str = {:?};\n",
        s(&el["tag"]),
        classes.join(" "),
        s(&el["id"]),
        // Off screen but laid out at the size ad slots have, so it is measurable.
        format!(
            "position:absolute;left:-10000px;top:-10000px;width:{}px;height:{}px",
            el["width"].as_u64().expect("element.width"),
            el["height"].as_u64().expect("element.height")
        ),
        s(&bait["request_path"]),
    );
    let out_dir = std::env::var("OUT_DIR").unwrap();
    std::fs::write(Path::new(&out_dir).join("bait.rs"), out).expect("writing bait.rs");
}

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
    let s = |v: &serde_json::Value| v.as_str().expect("a string in bait.json").to_owned();
    let element = |set: &serde_json::Value| {
        let el = &set["element"];
        let classes: Vec<String> = el["classes"].as_array().expect("element.classes").iter().map(s).collect();
        let px = |k: &str| format!("{}px", el[k].as_u64().expect("element width and height"));
        let spec = [s(&el["tag"]), classes.join(" "), s(&el["id"]), px("width"), px("height")].join("|");
        format!("Element {{ spec: {spec:?} }}")
    };
    let sets = bait["sets"].as_array().expect("bait.json has sets");
    let elements: Vec<String> = sets.iter().map(element).collect();
    let paths: Vec<String> = sets.iter().map(|set| s(&set["request_path"])).collect();
    let out = format!(
        "pub const ELEMENTS: [Element; {n}] = [{}];\npub const PATHS: [&str; {n}] = {paths:?};\n\
         pub const CONTROL_ELEMENT: Element = {};\npub const CONTROL_PATH: &str = {:?};\n",
        elements.join(", "),
        element(&bait["control"]),
        s(&bait["control"]["request_path"]),
        n = sets.len(),
    );
    let out_dir = std::env::var("OUT_DIR").unwrap();
    std::fs::write(Path::new(&out_dir).join("bait.rs"), out).expect("writing bait.rs");
}

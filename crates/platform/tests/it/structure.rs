//! The platform's own structure, checked from its imports ([`platform::testing::imports`]): no
//! circle between any two of its modules, so each stands on the ones below it — the
//! configuration core and the error envelope at the bottom, the feature registry and the
//! operations routes at the top — and none between the modules inside any of its folders
//! (`db`, `events`, `testing`).

use std::path::Path;

use platform::testing::imports::{folders_of, ImportGraph};

#[test]
fn no_circle_between_the_platforms_modules() {
    let graph = ImportGraph::of_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph.rooms().len() > 20,
        "implausibly few modules: {:?}",
        graph.rooms()
    );
    let cycles = graph.cycles();
    assert!(cycles.is_empty(), "\n{}", cycles.join("\n"));
}

#[test]
fn no_circle_inside_a_folder_of_the_platform() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let folders = folders_of(&src);
    assert!(folders.len() >= 3, "implausibly few folders: {folders:?}");
    let cycles: Vec<String> = folders
        .iter()
        .flat_map(|folder| ImportGraph::of_folder(&src, folder).cycles())
        .collect();
    // Known and not yet untangled: a consumer group's loop (in_process.rs, which defines
    // `Consumer`) and its settling of batches (delivery.rs, which implements more of `Consumer`
    // and reads the backlog through in_process.rs) are one type split over two files. Listed so
    // that any other circle, or this one's end, fails here.
    const KNOWN: &[&str] = &["circle {\"delivery\", \"in_process\"}:"];
    let unknown: Vec<&String> = cycles
        .iter()
        .filter(|cycle| !KNOWN.iter().any(|known| cycle.starts_with(known)))
        .collect();
    assert!(unknown.is_empty(), "{unknown:#?}");
    assert_eq!(
        cycles.len(),
        KNOWN.len(),
        "a known circle is gone: drop it from KNOWN\n{}",
        cycles.join("\n")
    );
}

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
    assert!(cycles.is_empty(), "\n{}", cycles.join("\n"));
}

//! The structure, checked from the imports ([`platform::testing::imports`]):
//!
//! - no circle between any two rooms of the crate (its top-level modules: every feature folder,
//!   and files such as `app.rs`, `cli.rs`, `schema.rs`) — so each can be read, tested and
//!   changed from the rooms it stands on, without the ones standing on it — and none between
//!   the modules inside any folder (a feature's `service.rs` and `store.rs`, …);
//! - every file reaches another room only through that room's front door (its `mod.rs`
//!   re-exports, `crate::article::ArticleService`), never into its submodules
//!   (`crate::article::store::…`), so a room can reorganise its insides without breaking others.
//!
//! Every folder and file under `src/` is covered: the rooms are read from the file system, not
//! listed here. (The platform crate cannot name a feature at all: the compiler holds that; its
//! own rooms are checked the same way by its `tests/it/structure.rs`.)

use std::path::Path;

use platform::testing::imports::{folders_of, front_door_violations, source_files, ImportGraph};

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_circle_between_rooms() {
    let graph = ImportGraph::of_crate(&src());
    assert!(
        graph.rooms().len() > 20,
        "implausibly few rooms: {:?}",
        graph.rooms()
    );
    let cycles = graph.cycles();
    assert!(cycles.is_empty(), "\n{}", cycles.join("\n"));
}

#[test]
fn rooms_reach_each_other_only_through_their_front_door() {
    let src = src();
    let graph = ImportGraph::of_crate(&src);
    let mut violations = Vec::new();
    for (file, _room) in source_files(&src) {
        let source = std::fs::read_to_string(src.join(&file)).unwrap();
        for path in front_door_violations(&source, &file, graph.rooms()) {
            violations.push(format!("{}: {path}", file.display()));
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn no_circle_inside_a_folder() {
    let src = src();
    let folders = folders_of(&src);
    assert!(folders.len() > 15, "implausibly few folders: {folders:?}");
    let cycles: Vec<String> = folders
        .iter()
        .flat_map(|folder| ImportGraph::of_folder(&src, folder).cycles())
        .collect();
    assert!(cycles.is_empty(), "\n{}", cycles.join("\n"));
}

//! The import graph of a crate, read from its source: what the structure tests hold.
//!
//! A crate's *rooms* are its top-level modules — each file `src/x.rs` and folder `src/x/` (the
//! crate roots `lib.rs` and `main.rs` are the house itself, not a room). A file *reaches* room
//! `x` when it names a path `crate::x…`, written out or inside a `use crate::{…}` group; its
//! own room does not count, and neither does its test module (from a `#[cfg(test)] mod` on:
//! tests may reach anything they check). Comments are ignored, doc links included.
//!
//! [`ImportGraph::cycles`] finds the circles (strongly connected groups of rooms): each is a
//! set of rooms that cannot be understood, tested or changed one without the others.
//! [`front_door_violations`] finds paths that reach into another room's submodules
//! (`crate::x::inner::…`, or the same through `super::`) instead of through the room's own
//! re-exports; both read paths with one reader, [`absolute_paths`].

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Which rooms each room reaches, and from which files.
#[derive(Debug, Default)]
pub struct ImportGraph {
    rooms: BTreeSet<String>,
    /// room → reached room → the files (relative to `src/`) that reach it.
    edges: BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>,
}

impl ImportGraph {
    /// The graph of the crate whose sources are under `src` (panics when they cannot be read:
    /// it is for tests).
    pub fn of_crate(src: &Path) -> Self {
        Self::of_folder(src, "")
    }

    /// The graph of one folder's modules — its files and subfolders; its `mod.rs`, the front
    /// door, is none of them — reaching each other through `super::`, `self::` or
    /// `crate::<folder>::` paths. `folder` is relative to `src` (`search`, `db`; `""` is the
    /// crate itself, whose rooms are its top-level modules).
    pub fn of_folder(src: &Path, folder: &str) -> Self {
        let dir = src.join(folder);
        let rooms = rooms_of(&dir);
        let base: Vec<String> = folder
            .split('/')
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect();
        let mut graph = Self {
            rooms: rooms.clone(),
            edges: BTreeMap::new(),
        };
        for (file, room) in source_files(&dir) {
            if room == "mod" {
                continue;
            }
            let source = std::fs::read_to_string(dir.join(&file))
                .unwrap_or_else(|err| panic!("read {}: {err}", file.display()));
            let module = module_path(&base, &file);
            for path in absolute_paths(&code_of(&source), &module) {
                let Some(reached) = path.get(base.len()) else {
                    continue;
                };
                if path[..base.len()] == base[..] && rooms.contains(reached) && *reached != room {
                    graph
                        .edges
                        .entry(room.clone())
                        .or_default()
                        .entry(reached.clone())
                        .or_default()
                        .insert(PathBuf::from(folder).join(&file));
                }
            }
        }
        graph
    }

    /// Every room.
    pub fn rooms(&self) -> &BTreeSet<String> {
        &self.rooms
    }

    /// The rooms `room` reaches.
    pub fn reached_from(&self, room: &str) -> BTreeSet<&str> {
        self.edges
            .get(room)
            .map(|reached| reached.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// The circles: groups of two or more rooms that all reach each other, each sorted, and
    /// described with the edges inside it (`a → b (a/x.rs, a/y.rs)`).
    pub fn cycles(&self) -> Vec<String> {
        let mut tarjan = Tarjan::default();
        for room in &self.rooms {
            if !tarjan.index.contains_key(room.as_str()) {
                tarjan.visit(self, room);
            }
        }
        tarjan
            .groups
            .into_iter()
            .filter(|group| group.len() > 1)
            .map(|group| {
                let members: BTreeSet<&str> = group.iter().map(String::as_str).collect();
                let mut lines = vec![format!("circle {members:?}:")];
                for from in &members {
                    for (to, files) in self.edges.get(*from).into_iter().flatten() {
                        if members.contains(to.as_str()) {
                            lines.push(format!("  {from} → {to} ({files:?})"));
                        }
                    }
                }
                lines.join("\n")
            })
            .collect()
    }
}

/// Tarjan's strongly connected components over the room graph.
#[derive(Default)]
struct Tarjan {
    next: usize,
    index: BTreeMap<String, usize>,
    low: BTreeMap<String, usize>,
    stack: Vec<String>,
    on_stack: BTreeSet<String>,
    groups: Vec<Vec<String>>,
}

impl Tarjan {
    fn visit(&mut self, graph: &ImportGraph, room: &str) {
        self.index.insert(room.to_owned(), self.next);
        self.low.insert(room.to_owned(), self.next);
        self.next += 1;
        self.stack.push(room.to_owned());
        self.on_stack.insert(room.to_owned());
        for reached in graph.reached_from(room) {
            if !self.index.contains_key(reached) {
                self.visit(graph, reached);
                let low = self.low[reached].min(self.low[room]);
                self.low.insert(room.to_owned(), low);
            } else if self.on_stack.contains(reached) {
                let low = self.index[reached].min(self.low[room]);
                self.low.insert(room.to_owned(), low);
            }
        }
        if self.low[room] == self.index[room] {
            let mut group = Vec::new();
            while let Some(member) = self.stack.pop() {
                self.on_stack.remove(&member);
                let done = member == room;
                group.push(member);
                if done {
                    break;
                }
            }
            group.sort();
            self.groups.push(group);
        }
    }
}

/// The rooms of the crate under `src`: its top-level files and folders, crate roots aside.
pub fn rooms_of(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .unwrap_or_else(|err| panic!("read {}: {err}", src.display()))
        .map(|entry| entry.unwrap_or_else(|err| panic!("read {}: {err}", src.display())))
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_owned)
            }
        })
        .filter(|room| room != "lib" && room != "main" && room != "mod")
        .collect()
}

/// Every file and folder under `src`, at any depth.
fn walk(src: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
        {
            let path = entry
                .unwrap_or_else(|err| panic!("read {}: {err}", dir.display()))
                .path();
            if path.is_dir() {
                dirs.push(path.clone());
            }
            found.push(path);
        }
    }
    found
}

/// The folders under `src` holding modules, at any depth (`search`, `db`, `testing`), relative
/// to `src` with `/` between levels, sorted.
pub fn folders_of(src: &Path) -> Vec<String> {
    let mut folders: Vec<String> = walk(src)
        .into_iter()
        .filter(|path| {
            path.is_dir() && (path.join("mod.rs").exists() || path.with_extension("rs").exists())
        })
        .filter_map(|path| {
            path.strip_prefix(src)
                .ok()
                .map(|relative| relative.to_string_lossy().replace('\\', "/"))
        })
        .collect();
    folders.sort();
    folders
}

/// Every `.rs` file under `src` (relative to it) with its room; crate roots aside.
pub fn source_files(src: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for path in walk(src) {
        if path.is_dir() || path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
        let first = relative
            .components()
            .next()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        let room = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
        if room != "lib" && room != "main" {
            files.push((relative, room));
        }
    }
    files.sort();
    files
}

/// `source` without its comments and without its test module (from `#[cfg(test)]` followed by
/// a `mod` on).
pub fn code_of(source: &str) -> String {
    let mut code = String::with_capacity(source.len());
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            // Skip the item's other attributes (`#[allow(…)]`) to see whether it is a module.
            let mut ahead = lines.clone();
            let next = loop {
                match ahead.next().map(str::trim_start) {
                    Some(attribute) if attribute.starts_with("#[") => continue,
                    other => break other.unwrap_or(""),
                }
            };
            if next.starts_with("mod ") || next.starts_with("pub mod ") {
                break;
            }
        }
        let without_comment = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        code.push_str(without_comment);
        code.push('\n');
    }
    code
}

/// The rooms among `rooms` that `source`, a top-level module, names (`crate::room…`, or `room`
/// at the top level of a `use crate::{…}` group).
pub fn rooms_reached(source: &str, rooms: &BTreeSet<String>) -> BTreeSet<String> {
    absolute_paths(&code_of(source), &[])
        .into_iter()
        .filter_map(|path| path.into_iter().next())
        .filter(|room| rooms.contains(room))
        .collect()
}

/// Paths in `source`, the file `file` (relative to `src/`), that reach into another room's
/// submodule `inner` (`crate::room::inner::…`, or the same through `super::`/`self::`, grouped
/// or not) instead of through `room`'s re-exports; outside comments and test modules. Each is
/// given as `room::inner::`.
pub fn front_door_violations(source: &str, file: &Path, rooms: &BTreeSet<String>) -> Vec<String> {
    let module = module_path(&[], file);
    let own = module.first().map(String::as_str).unwrap_or_default();
    absolute_paths(&code_of(source), &module)
        .into_iter()
        .filter_map(|path| match path.as_slice() {
            [room, inner, _, ..]
                if room != own
                    && rooms.contains(room)
                    && inner
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') =>
            {
                Some(format!("{room}::{inner}::"))
            }
            _ => None,
        })
        .collect()
}

/// The module path of `file` (relative to the folder of module `base`): `x.rs` and `x/mod.rs`
/// are `base::x`, `x/y.rs` is `base::x::y`.
fn module_path(base: &[String], file: &Path) -> Vec<String> {
    let mut module = base.to_vec();
    for part in file.components() {
        let part = part.as_os_str().to_string_lossy();
        let name = part.strip_suffix(".rs").unwrap_or(&part);
        if name != "mod" {
            module.push(name.to_owned());
        }
    }
    module
}

/// Every `crate::…`, `self::…` and `super::…` path in `code` (of module `module`), made
/// absolute (from the crate root, without `crate`); a `{…}` group gives one path per item.
pub fn absolute_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts_word = at == 0 || {
            let before = bytes[at - 1];
            !(before.is_ascii_alphanumeric() || before == b'_' || before == b':')
        };
        let (mut prefix, mut after) = match () {
            () if starts_word && rest.starts_with("crate::") => (Vec::new(), &rest[7..]),
            () if starts_word && rest.starts_with("self::") => (module.to_vec(), &rest[6..]),
            () if starts_word && rest.starts_with("super::") => {
                let mut prefix = module.to_vec();
                let mut after = rest;
                while let Some(next) = after.strip_prefix("super::") {
                    prefix.pop();
                    after = next;
                }
                (prefix, after)
            }
            () => {
                at += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            }
        };
        loop {
            after = after.trim_start();
            if let Some(group) = after.strip_prefix('{') {
                for item in top_level_items(group) {
                    let mut path = prefix.clone();
                    path.extend(
                        item.trim()
                            .split("::")
                            .map(str::trim)
                            .map(leading_ident)
                            .take_while(|segment| !segment.is_empty())
                            .map(str::to_owned),
                    );
                    paths.push(path);
                }
                break;
            }
            let segment = leading_ident(after);
            if segment.is_empty() {
                paths.push(prefix);
                break;
            }
            prefix.push(segment.to_owned());
            match after[segment.len()..].strip_prefix("::") {
                Some(next) => after = next,
                None => {
                    paths.push(prefix);
                    break;
                }
            }
        }
        at = code.len() - after.len();
    }
    paths
}

/// The comma-separated items at the top level of a `{…}` group whose opening brace has been
/// consumed (up to its closing brace).
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..at]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The identifier `text` starts with.
fn leading_ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rooms(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn written_out_and_grouped_paths_are_seen_and_comments_and_tests_are_not() {
        let rooms = rooms(&["article", "auth", "user", "feed"]);
        let source = "use crate::article::Article;\n\
                      use crate::{\n    auth::{AuthService, Tokens},\n    user::UserStore,\n};\n\
                      // crate::feed::Feed in a comment\n\
                      /// [`crate::feed`] in a doc link\n\
                      #[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n    use crate::feed::Feed;\n}\n";
        assert_eq!(
            rooms_reached(source, &rooms),
            ["article", "auth", "user"]
                .into_iter()
                .map(str::to_owned)
                .collect()
        );
    }

    #[test]
    fn reaching_into_a_submodule_is_a_violation_and_the_front_door_is_not() {
        let rooms = rooms(&["article", "auth", "feed"]);
        let feed = Path::new("feed/service.rs");
        assert_eq!(
            front_door_violations("use crate::article::model::X;", feed, &rooms),
            ["article::model::"]
        );
        assert_eq!(
            front_door_violations(
                "use crate::{auth::{AuthService}, article::store::S};",
                feed,
                &rooms
            ),
            ["article::store::"]
        );
        assert_eq!(
            front_door_violations("use crate::article::{model::X, Y};", feed, &rooms),
            ["article::model::"],
            "a group after the room"
        );
        assert_eq!(
            front_door_violations(
                "use super::super::article::store::S;",
                Path::new("feed/inner/deep.rs"),
                &rooms
            ),
            [] as [&str; 0],
            "super::super from feed/inner/deep.rs is feed::article, inside its own room"
        );
        assert_eq!(
            front_door_violations(
                "use super::super::article::store::S;",
                Path::new("feed/inner.rs"),
                &rooms
            ),
            ["article::store::"],
            "super:: paths are resolved from the file's module"
        );
        assert!(front_door_violations(
            "use crate::article::{ArticleEvent, ArticleStatus}; crate::article::text_of(x);",
            feed,
            &rooms
        )
        .is_empty());
        // Its own insides are a room's business.
        assert!(front_door_violations(
            "use crate::article::model::X; use super::store::S;",
            Path::new("article/http.rs"),
            &rooms
        )
        .is_empty());
        assert!(front_door_violations(
            "platform::jobs::JobRegistry; scheduler::sql::x",
            feed,
            &rooms
        )
        .is_empty());
    }

    #[test]
    fn paths_are_made_absolute_from_the_module_they_are_in() {
        let module = ["search".to_owned(), "highlight".to_owned()];
        let code = "use super::{query::ParsedQuery, service::Highlight, tokens};\n\
                    use crate::user::Person; let x = self::inner::f(); super::super::app::run();";
        let paths = absolute_paths(code, &module);
        let shown: Vec<String> = paths.iter().map(|path| path.join("::")).collect();
        assert_eq!(
            shown,
            [
                "search::query::ParsedQuery",
                "search::service::Highlight",
                "search::tokens",
                "user::Person",
                "search::highlight::inner::f",
                "app::run",
            ]
        );
    }

    #[test]
    fn a_circle_inside_a_folder_is_found_and_mod_rs_is_not_a_room() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir(src.join("feature")).unwrap();
        let write =
            |name: &str, text: &str| std::fs::write(src.join("feature").join(name), text).unwrap();
        write(
            "mod.rs",
            "pub mod retry; pub mod service; pub use service::S; use retry::Q;",
        );
        write("retry.rs", "use super::service::S;");
        write("service.rs", "use super::{retry::Q, S as _};");
        let cycles = ImportGraph::of_folder(src, "feature").cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(cycles[0].contains("retry → service"), "{}", cycles[0]);
        write("retry.rs", "pub struct Q;");
        assert!(ImportGraph::of_folder(src, "feature").cycles().is_empty());
    }

    #[test]
    fn a_circle_is_found_and_named_with_its_edges() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::write(src.join("lib.rs"), "pub mod a; pub mod b; pub mod c;").unwrap();
        std::fs::write(src.join("a.rs"), "use crate::b::B;").unwrap();
        std::fs::create_dir(src.join("b")).unwrap();
        std::fs::write(src.join("b/mod.rs"), "pub use inner::B; mod inner;").unwrap();
        std::fs::write(src.join("b/inner.rs"), "use crate::a::A;").unwrap();
        std::fs::write(src.join("c.rs"), "use crate::a::A;").unwrap();
        let graph = ImportGraph::of_crate(src);
        let cycles = graph.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(
            cycles[0].starts_with("circle {\"a\", \"b\"}"),
            "{}",
            cycles[0]
        );
        assert!(
            cycles[0].contains("b → a ({\"b/inner.rs\"})"),
            "{}",
            cycles[0]
        );
        // Break it: no circle left.
        std::fs::write(src.join("b/inner.rs"), "pub struct B;").unwrap();
        assert!(ImportGraph::of_crate(src).cycles().is_empty());
        assert_eq!(folders_of(src), ["b"]);
    }
}

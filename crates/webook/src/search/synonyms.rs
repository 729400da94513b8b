//! Synonyms: words a reader may type for one another (`k8s` ↔ `kubernetes`), applied when a
//! query is built — a query term that is one of a group also matches the others, as exactly
//! as itself — so a change needs no reindex.
//!
//! Groups come from a built-in list ([`BUILT_IN`], unless `search_synonyms_builtin = false`)
//! and from the file `search_synonyms` names: one group per line, words separated by commas,
//! `#` starting a comment. The file is read at start and again when it changes (its
//! modification time, looked at no more than every [`RECHECK`]); a file that cannot be read
//! keeps the groups read last and says why in the log and in
//! `search_synonyms_reload_errors_total`.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::Context;
use arc_swap::ArcSwap;

use super::fold::fold;

/// Counter: failed reads of the synonyms file.
pub const SEARCH_SYNONYMS_RELOAD_ERRORS_TOTAL: &str = "search_synonyms_reload_errors_total";

/// How often the file's modification time is looked at, at most.
pub const RECHECK: Duration = Duration::from_secs(2);

/// The groups known without a file: abbreviations and English/Chinese names of a tech
/// community's everyday subjects.
pub const BUILT_IN: &[&[&str]] = &[
    &["k8s", "kubernetes"],
    &["js", "javascript"],
    &["ts", "typescript"],
    &["golang", "go"],
    &["pg", "postgres", "postgresql"],
    &["es", "elasticsearch"],
    &["mq", "消息队列"],
    &["前端", "frontend"],
    &["后端", "backend"],
    &["py", "python"],
    &["ml", "机器学习", "machine learning"],
    &["ai", "人工智能"],
];

/// Word → the other words of its groups, all folded.
type Map = HashMap<String, Vec<String>>;

fn add_group(map: &mut Map, group: &[String]) {
    for word in group {
        let others = map.entry(word.clone()).or_default();
        for other in group {
            if other != word && !others.contains(other) {
                others.push(other.clone());
            }
        }
    }
}

/// The groups of a synonyms file's text.
pub fn parse(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default())
        .map(|line| {
            line.split([',', '，'])
                .map(|word| fold(word.trim()))
                .filter(|word| word.chars().any(char::is_alphanumeric))
                .collect::<Vec<_>>()
        })
        .filter(|group| group.len() > 1)
        .collect()
}

/// When the file at `path` was last modified, if that can be told.
fn modified_at(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

#[derive(Debug)]
struct FileState {
    checked: Instant,
    modified: Option<SystemTime>,
}

/// The synonyms in force, reloaded from their file when it changes.
#[derive(Debug, Clone)]
pub struct Synonyms {
    map: Arc<ArcSwap<Map>>,
    built_in: bool,
    file: Option<PathBuf>,
    state: Arc<Mutex<FileState>>,
}

impl Default for Synonyms {
    /// The built-in groups, no file.
    fn default() -> Self {
        Self::new(true, None)
    }
}

impl Synonyms {
    /// The built-in groups (if `built_in`) and those of `file` — not read yet: see
    /// [`Synonyms::load`].
    pub fn new(built_in: bool, file: Option<PathBuf>) -> Self {
        let synonyms = Self {
            map: Arc::new(ArcSwap::from_pointee(Map::new())),
            built_in,
            file,
            state: Arc::new(Mutex::new(FileState {
                checked: Instant::now(),
                modified: None,
            })),
        };
        synonyms.map.store(Arc::new(synonyms.assemble(&[])));
        synonyms
    }

    /// Reads the file now (start-up: an unreadable file is an error then).
    pub fn load(&self) -> anyhow::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        self.read(path, modified_at(path))
    }

    /// Reads the file at `path`, last modified at `modified` (looked at before it is read).
    fn read(&self, path: &std::path::Path, modified: Option<SystemTime>) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the search synonyms file {}", path.display()))?;
        self.map.store(Arc::new(self.assemble(&parse(&text))));
        // A file changed within the last check may still be being written (under the same
        // coarse time stamp): read it again at the next check.
        let settled = modified
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age >= RECHECK);
        self.lock().modified = modified.filter(|_| settled);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FileState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn assemble(&self, from_file: &[Vec<String>]) -> Map {
        let mut map = Map::new();
        if self.built_in {
            for group in BUILT_IN {
                let group: Vec<String> = group.iter().map(|word| fold(word)).collect();
                add_group(&mut map, &group);
            }
        }
        for group in from_file {
            add_group(&mut map, group);
        }
        map
    }

    /// Reads the file again if it changed since it was last read (looked at no more than
    /// every [`RECHECK`]). Blocking: call it where a query is built.
    pub fn refresh(&self) {
        let Some(path) = &self.file else {
            return;
        };
        let modified = {
            let mut state = self.lock();
            if state.checked.elapsed() < RECHECK {
                return;
            }
            state.checked = Instant::now();
            let modified = modified_at(path);
            if modified.is_some() && modified == state.modified {
                return;
            }
            modified
        };
        match self.read(path, modified) {
            Ok(()) => tracing::info!(file = %path.display(), "search synonyms reloaded"),
            Err(err) => {
                metrics::counter!(SEARCH_SYNONYMS_RELOAD_ERRORS_TOTAL).increment(1);
                tracing::warn!(error = %format!("{err:#}"), "search synonyms kept as they were");
            }
        }
    }

    /// The other words of `word`'s groups (`word` folded).
    pub fn of(&self, word: &str) -> Vec<String> {
        self.map.load().get(word).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_read_from_lines_and_work_both_ways() {
        assert_eq!(
            parse("K8s, Kubernetes # orchestration\n\n单个\nJS，JavaScript"),
            [vec!["k8s", "kubernetes"], vec!["js", "javascript"]]
        );
        let synonyms = Synonyms::default();
        assert_eq!(synonyms.of("kubernetes"), ["k8s"]);
        assert_eq!(synonyms.of("postgres"), ["pg", "postgresql"]);
        assert!(synonyms.of("rust").is_empty());
        assert!(Synonyms::new(false, None).of("k8s").is_empty());
    }

    #[test]
    fn a_changed_file_is_read_again_and_a_broken_one_keeps_the_last_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("synonyms.txt");
        std::fs::write(&path, "vm, 虚拟机\n").unwrap();
        let synonyms = Synonyms::new(false, Some(path.clone()));
        synonyms.load().unwrap();
        assert_eq!(synonyms.of("vm"), ["虚拟机"]);
        std::fs::write(&path, "vm, virtual machine\n").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(later)
            .unwrap();
        synonyms.lock().checked = Instant::now() - RECHECK;
        synonyms.refresh();
        assert_eq!(synonyms.of("vm"), ["virtual machine"]);
        std::fs::remove_file(&path).unwrap();
        synonyms.lock().checked = Instant::now() - RECHECK;
        synonyms.refresh();
        assert_eq!(synonyms.of("vm"), ["virtual machine"]);
    }
}

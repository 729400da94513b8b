//! The index itself: its schema, the documents built from database rows, and the one writer
//! and reader of this process's index directory.
//!
//! Data flow: the feeder ([`super::feeder`]) turns events into [`Change`]s (a document to put,
//! or a key to drop) and calls [`SearchIndex::apply`], which writes them and commits them with
//! the [`IndexState`] — the schema version, the stream positions they reach and whether the
//! index is complete — as the commit's payload, then reloads the reader: a commit is both the
//! durability point and the moment queries see the change. Background merges that end later
//! swap their segments in on their own ([`reload_after_merges`]). Queries ([`super::query`])
//! take a searcher from the reader. Everything here blocks (disk, CPU): callers run it on blocking
//! threads.
//!
//! A writer that failed (its directory gone, the disk full) is not used again: the feeder
//! closes it ([`SearchIndex::close_writer`]) and opens the directory anew as another
//! [`SearchIndex`], swapped into the [`CurrentIndex`] queries read once it is whole. The old
//! one's reader keeps answering meanwhile: its segment files stay mapped even when deleted.
//! [`SearchIndex::committed`] tells whether the reopened directory still holds exactly the
//! last commit this one made.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
};

use anyhow::Context;
use arc_swap::ArcSwap;
use platform::events::follow::Positions;
use serde::{Deserialize, Serialize};
use tantivy::{
    directory::{Directory, MmapDirectory, WatchCallback, WatchHandle},
    schema::{
        Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED, STORED,
        STRING,
    },
    Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term,
};

use super::tokens;

/// The index queries read and the feeder writes; the feeder swaps in another when it had to
/// open the directory again.
pub type CurrentIndex = Arc<ArcSwap<SearchIndex>>;

/// Version of the schema and analyses below; an index committed under another is rebuilt.
/// Raise it with any change to the fields or to [`tokens`].
pub const SCHEMA_VERSION: u32 = 2;

/// Most threads one query searches segments with.
const MAX_QUERY_THREADS: usize = 4;

/// Memory the writer may buffer before it writes a segment (one indexing thread).
pub const MIN_WRITER_HEAP: usize = 15_000_000;

/// A file in the index directory saying the database was written behind the event stream
/// (`webook seed`): the index is rebuilt at the next open, and the file removed once it is.
const STALE_MARKER: &str = "STALE";

/// Marks the index in `dir` (if any) for a rebuild at its next open; true if there is one.
/// Safe while a server uses it: that server rebuilds at its next start.
pub fn mark_stale(dir: &Path) -> anyhow::Result<bool> {
    if !dir.exists() {
        return Ok(false);
    }
    let context = || {
        format!(
            "marking the search index in {} for a rebuild",
            dir.display()
        )
    };
    // Durable before the caller goes on (a restore removes its journal next: a power loss
    // must not leave the old index serving the restored database).
    let marker = dir.join(STALE_MARKER);
    std::fs::write(&marker, b"written behind the event stream\n").with_context(context)?;
    platform::db::sync_path(&marker)
        .and_then(|()| platform::db::sync_path(dir))
        .with_context(context)?;
    Ok(true)
}

/// The error of a write after [`SearchIndex::close_writer`].
const WRITER_CLOSED: &str = "the search index writer was closed after a failure";

/// Removes everything inside `dir`.
fn empty_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Kinds of document, the `kind` field's values.
pub const ARTICLE: &str = "article";
/// A user's profile.
pub const USER: &str = "user";

/// The schema's fields. Text fields hold [`tokens::GRAMS`] (with positions: phrases); the
/// `_pinyin` ones [`tokens::PINYIN`] of the same text.
#[derive(Debug, Clone, Copy)]
pub struct Fields {
    /// `article:<id>` / `user:<id>`: what a change replaces.
    pub key: Field,
    /// [`ARTICLE`] or [`USER`].
    pub kind: Field,
    /// The object's id (fast: read for every hit without the document store).
    pub id: Field,
    /// Article title.
    pub title: Field,
    #[allow(missing_docs)]
    pub title_pinyin: Field,
    /// Article text (the content without markup).
    pub body: Field,
    /// Article author's display name.
    pub author: Field,
    #[allow(missing_docs)]
    pub author_pinyin: Field,
    /// Article tags' names.
    pub tags: Field,
    #[allow(missing_docs)]
    pub tags_pinyin: Field,
    /// First publication time (ms, fast): freshness.
    pub ctime: Field,
    /// Like count (fast): popularity.
    pub likes: Field,
    /// User nickname.
    pub nickname: Field,
    #[allow(missing_docs)]
    pub nickname_pinyin: Field,
    /// User about-me.
    pub about: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text = |analysis: &str, record: IndexRecordOption| {
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(analysis)
                .set_index_option(record),
        )
    };
    let grams = text(tokens::GRAMS, IndexRecordOption::WithFreqsAndPositions);
    let pinyin = text(tokens::PINYIN, IndexRecordOption::WithFreqs);
    let fields = Fields {
        key: builder.add_text_field("key", STRING),
        kind: builder.add_text_field("kind", STRING),
        id: builder.add_u64_field("id", INDEXED | FAST | STORED),
        title: builder.add_text_field("title", grams.clone()),
        title_pinyin: builder.add_text_field("title_pinyin", pinyin.clone()),
        body: builder.add_text_field("body", grams.clone()),
        author: builder.add_text_field("author", grams.clone()),
        author_pinyin: builder.add_text_field("author_pinyin", pinyin.clone()),
        tags: builder.add_text_field("tags", grams.clone()),
        tags_pinyin: builder.add_text_field("tags_pinyin", pinyin.clone()),
        ctime: builder.add_i64_field("ctime", FAST),
        likes: builder.add_u64_field("likes", FAST),
        nickname: builder.add_text_field("nickname", grams.clone()),
        nickname_pinyin: builder.add_text_field("nickname_pinyin", pinyin),
        about: builder.add_text_field("about", grams),
    };
    (builder.build(), fields)
}

/// What each commit records about the index (its payload).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexState {
    /// [`SCHEMA_VERSION`] of the index.
    pub schema: u32,
    /// Whether a rebuild finished: the index holds everything up to `positions`.
    pub complete: bool,
    /// The stream positions applied (cluster mode; empty in-process).
    pub positions: Positions,
    /// When the rebuild the index descends from started reading the database (ms; 0 for an
    /// index committed before this was recorded): it holds every change committed before.
    #[serde(default)]
    pub built_at: i64,
}

/// What identifies a commit on disk: its opstamp (raised by every commit) and payload (the
/// [`IndexState`], whose `built_at` tells rebuilds apart). Background merges rewrite the
/// segment list under the same mark: they do not change what the index holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMark {
    opstamp: u64,
    payload: Option<String>,
}

impl CommitMark {
    fn of(index: &Index) -> anyhow::Result<Self> {
        let metas = index.load_metas()?;
        Ok(Self {
            opstamp: metas.opstamp,
            payload: metas.payload,
        })
    }
}

/// A published article as indexed.
#[derive(Debug, Clone, PartialEq)]
pub struct ArticleDoc {
    /// Article id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// The content's text, markup dropped.
    pub text: String,
    /// Author's display name.
    pub author: String,
    /// Its tags' names.
    pub tags: Vec<String>,
    /// First publication (ms).
    pub ctime: i64,
    /// Like count.
    pub likes: i64,
}

/// A user's profile as indexed (never email or phone: they are not even read).
#[derive(Debug, Clone, PartialEq)]
pub struct UserDoc {
    /// User id.
    pub id: i64,
    /// Nickname.
    pub nickname: String,
    /// About me.
    pub about: String,
}

/// One change to the index.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Put (or replace) an article.
    Article(ArticleDoc),
    /// Put (or replace) a user.
    User(UserDoc),
    /// Drop whatever is under this key (a withdrawn article, an emptied profile).
    Remove(String),
}

/// The key of article `id`.
pub fn article_key(id: i64) -> String {
    format!("{ARTICLE}:{id}")
}

/// The key of user `id`.
pub fn user_key(id: i64) -> String {
    format!("{USER}:{id}")
}

fn id_value(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

/// This process's index: one writer (behind a mutex: the feeder and a rebuild never write at
/// once; `None` once closed), one reader, reloaded after each commit and each merge of it.
pub struct SearchIndex {
    dir: PathBuf,
    writer_heap: usize,
    index: Index,
    fields: Fields,
    writer: Mutex<Option<IndexWriter>>,
    reader: IndexReader,
    /// The last commit on disk: found at open, then each one this writer made.
    committed: Arc<Mutex<Option<CommitMark>>>,
    /// Keeps [`reload_after_merges`] subscribed to changes of `meta.json`.
    _merges: WatchHandle,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SearchIndex")
    }
}

/// Called by tantivy's watcher (its own thread, every 500 ms) when `meta.json` changed:
/// reloads the reader when the file still holds this index's last commit, i.e. a background
/// merge swapped its segments in. A commit reloads by itself ([`SearchIndex::commit`]), and a
/// directory replaced from outside is the feeder's to take or rebuild, never read half-built.
/// Without it the reader kept the merged-away segments' files mapped — deleted, their disk
/// space and page cache held (72 MB after building 100 000 articles) — until the next commit.
fn reload_after_merges(index: &Index, reader: &IndexReader, committed: &Mutex<Option<CommitMark>>) {
    // Held through the reload, which a commit makes under it too.
    let ours = committed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Ok(on_disk) = CommitMark::of(index) else {
        return;
    };
    if ours.as_ref() == Some(&on_disk) {
        if let Err(err) = reader.reload() {
            tracing::warn!(error = %err, "search: reloading the index after a merge failed");
        }
    }
}

impl SearchIndex {
    /// Opens the index in `dir` (created if missing), with `writer_heap` bytes for the
    /// writer; returns it with its last committed state, `None` when it must be rebuilt (new,
    /// another schema version, or no readable state) — in which case it has been emptied.
    pub fn open(dir: &Path, writer_heap: usize) -> anyhow::Result<(Self, Option<IndexState>)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the search index directory {}", dir.display()))?;
        Self::open_in(dir, writer_heap)
    }

    /// Opens this index's directory again, as [`SearchIndex::open`] does but never creating
    /// it (a missing directory is an error: it may be a volume's mount point), for a new writer
    /// after [`SearchIndex::close_writer`].
    pub fn reopen(&self) -> anyhow::Result<(Self, Option<IndexState>)> {
        let dir = &self.dir;
        if !std::fs::metadata(dir).is_ok_and(|meta| meta.is_dir()) {
            return Err(
                anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::NotFound)).context(
                    format!("the search index directory {} is missing", dir.display()),
                ),
            );
        }
        Self::open_in(dir, self.writer_heap)
    }

    fn open_in(dir: &Path, writer_heap: usize) -> anyhow::Result<(Self, Option<IndexState>)> {
        let (schema, fields) = schema();
        let directory = MmapDirectory::open(dir)
            .with_context(|| format!("opening the search index in {}", dir.display()))?;
        let existing = Index::exists(&directory).unwrap_or(false);
        let opened = if existing {
            match Index::open(directory) {
                Ok(index) if index.schema() == schema => Some(index),
                Ok(_) => None,
                Err(err) => {
                    tracing::warn!(error = %err, "unreadable search index; rebuilding it");
                    None
                }
            }
        } else {
            None
        };
        if let Some(index) = opened {
            let state = index
                .load_metas()
                .ok()
                .and_then(|metas| metas.payload)
                .and_then(|payload| serde_json::from_str::<IndexState>(&payload).ok())
                .filter(|state| state.schema == SCHEMA_VERSION && state.complete)
                .filter(|_| !dir.join(STALE_MARKER).exists());
            match Self::assemble(dir, writer_heap, index, fields)? {
                Ok(search) => return search.started(state),
                // Its meta file names segments that are not all there (a partial restore).
                Err(err) => {
                    tracing::warn!(error = %err, "unreadable search index; rebuilding it");
                }
            }
        }
        // Another schema, garbage or nothing: start from an empty directory (emptied, not
        // removed: it may be a mount point).
        empty_dir(dir)
            .with_context(|| format!("clearing the search index in {}", dir.display()))?;
        let index = Index::create_in_dir(dir, schema)?;
        let search = Self::assemble(dir, writer_heap, index, fields)??;
        search.started(None)
    }

    /// The index with its writer (an error: the directory is locked or cannot be written) and
    /// its reader (an error: segments cannot be read).
    fn assemble(
        dir: &Path,
        writer_heap: usize,
        mut index: Index,
        fields: Fields,
    ) -> anyhow::Result<tantivy::Result<Self>> {
        // A query searches the segments on every core: the latency of one query, not the
        // throughput of many, is what a reader waits for.
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        if cores > 1 {
            index.set_multithread_executor(cores.min(MAX_QUERY_THREADS))?;
        }
        index
            .tokenizers()
            .register(tokens::GRAMS, tokens::Analysis::GRAMS);
        index
            .tokenizers()
            .register(tokens::PINYIN, tokens::Analysis::PINYIN);
        let writer = index
            .writer_with_num_threads(1, writer_heap.max(MIN_WRITER_HEAP))
            .context("opening the search index writer (is another webook using this data dir?)")?;
        let reader = match index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
        {
            Ok(reader) => reader,
            Err(err) => return Ok(Err(err)),
        };
        let committed = Arc::new(Mutex::new(Some(CommitMark::of(&index)?)));
        let merges = index
            .directory()
            .watch(WatchCallback::new({
                let (index, reader, committed) = (index.clone(), reader.clone(), committed.clone());
                move || reload_after_merges(&index, &reader, &committed)
            }))
            .context("watching the search index for merges")?;
        Ok(Ok(Self {
            dir: dir.to_path_buf(),
            writer_heap,
            index,
            fields,
            writer: Mutex::new(Some(writer)),
            reader,
            committed,
            _merges: merges,
        }))
    }

    /// `self` as [`SearchIndex::open`] returns it with `state`.
    fn started(self, state: Option<IndexState>) -> anyhow::Result<(Self, Option<IndexState>)> {
        if state.is_none() {
            // A rebuild starts empty, whatever an earlier attempt left.
            self.clear()?;
        }
        Ok((self, state))
    }

    /// The directory of the index.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last commit on disk as this index knows it: what it found at open, then each
    /// commit it made.
    pub fn committed(&self) -> Option<CommitMark> {
        self.lock_committed().clone()
    }

    fn lock_committed(&self) -> MutexGuard<'_, Option<CommitMark>> {
        self.committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Drops the writer (waiting for its threads) and so its lock on the directory; the reader
    /// keeps answering from the last commit, and writes fail from now on.
    pub fn close_writer(&self) {
        let writer = self.writer().take();
        drop(writer);
    }

    /// The fields, for queries.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// The reader (queries take a searcher from it).
    pub fn reader(&self) -> &IndexReader {
        &self.reader
    }

    /// The index (its tokenizers, for queries).
    pub fn index(&self) -> &Index {
        &self.index
    }

    fn writer(&self) -> MutexGuard<'_, Option<IndexWriter>> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `changes` (not yet committed: see [`SearchIndex::commit`]).
    pub fn write(&self, changes: Vec<Change>) -> anyhow::Result<()> {
        let guard = self.writer();
        let writer = guard.as_ref().context(WRITER_CLOSED)?;
        for change in changes {
            let (key, document) = match change {
                Change::Article(article) => (article_key(article.id), Some(self.article(article))),
                Change::User(user) => (user_key(user.id), Some(self.user(user))),
                Change::Remove(key) => (key, None),
            };
            writer.delete_term(Term::from_field_text(self.fields.key, &key));
            if let Some(document) = document {
                writer.add_document(document)?;
            }
        }
        Ok(())
    }

    /// Commits what was written with `state` as the payload and makes it visible to queries.
    pub fn commit(&self, state: &IndexState) -> anyhow::Result<()> {
        let payload = serde_json::to_string(state)?;
        {
            let mut guard = self.writer();
            let writer = guard.as_mut().context(WRITER_CLOSED)?;
            let mut prepared = writer.prepare_commit()?;
            prepared.set_payload(&payload);
            prepared.commit()?;
            let mark = CommitMark::of(&self.index);
            let mut committed = self.lock_committed();
            *committed = mark.as_ref().ok().cloned();
            mark?;
            // Under the mark's lock, as [`reload_after_merges`]: two reloads at once could
            // store the older searcher last and hide this commit from queries for a while.
            self.reader.reload()?;
        }
        Ok(())
    }

    /// After a rebuild's commit: the index matches the database again ([`mark_stale`]).
    pub fn mark_fresh(&self) -> anyhow::Result<()> {
        match std::fs::remove_file(self.dir.join(STALE_MARKER)) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(()),
        }
    }

    /// [`SearchIndex::write`] then [`SearchIndex::commit`].
    pub fn apply(&self, changes: Vec<Change>, state: &IndexState) -> anyhow::Result<()> {
        self.write(changes)?;
        self.commit(state)
    }

    /// Drops every document (the first step of a rebuild; committed with the next commit).
    pub fn clear(&self) -> anyhow::Result<()> {
        self.writer()
            .as_ref()
            .context(WRITER_CLOSED)?
            .delete_all_documents()?;
        Ok(())
    }

    /// Documents of `kind` visible to queries.
    pub fn count(&self, kind: &str) -> anyhow::Result<u64> {
        let searcher = self.reader.searcher();
        let query = tantivy::query::TermQuery::new(
            Term::from_field_text(self.fields.kind, kind),
            IndexRecordOption::Basic,
        );
        Ok(searcher.search(&query, &tantivy::collector::Count)? as u64)
    }

    fn article(&self, article: ArticleDoc) -> TantivyDocument {
        let f = &self.fields;
        let mut doc = TantivyDocument::new();
        doc.add_text(f.key, article_key(article.id));
        doc.add_text(f.kind, ARTICLE);
        doc.add_u64(f.id, id_value(article.id));
        doc.add_text(f.title, &article.title);
        doc.add_text(f.title_pinyin, &article.title);
        doc.add_text(f.body, &article.text);
        doc.add_text(f.author, &article.author);
        doc.add_text(f.author_pinyin, &article.author);
        for tag in &article.tags {
            doc.add_text(f.tags, tag);
            doc.add_text(f.tags_pinyin, tag);
        }
        doc.add_i64(f.ctime, article.ctime);
        doc.add_u64(f.likes, u64::try_from(article.likes).unwrap_or(0));
        doc
    }

    fn user(&self, user: UserDoc) -> TantivyDocument {
        let f = &self.fields;
        let mut doc = TantivyDocument::new();
        doc.add_text(f.key, user_key(user.id));
        doc.add_text(f.kind, USER);
        doc.add_u64(f.id, id_value(user.id));
        doc.add_text(f.nickname, &user.nickname);
        doc.add_text(f.nickname_pinyin, &user.nickname);
        doc.add_text(f.about, &user.about);
        doc
    }
}

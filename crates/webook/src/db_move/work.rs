//! The move's long work, wherever it is asked for (the CLI with a progress bar, the admin API in
//! the background): starting, the bulk copy, replication of logged changes, validation in both
//! directions and the guarded fixer. All of it reads in keyset batches — never OFFSET — through
//! the mover's own connections ([`Side`]).

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;

use platform::{
    config::DatabaseKind,
    db::{now_millis, Db, Migration},
};

use super::{
    control::{Control, MoveState, Phase, TableProgress, Task, Validation},
    tables::{
        delete_rows, key_text, parse_key, write_rows, Batch, Key, OnConflict, Side, Table,
        TableRow, MOVER_MARKER,
    },
};

/// Rows per copy or validation batch.
pub const BATCH_ROWS: usize = 1_000;
/// Change entries per replication pass.
pub const CHANGES_PER_PASS: i64 = 500;
/// The advisory lock that lets one replicator at a time drain a PostgreSQL change log.
const REPLICATION_LOCK: i64 = platform::db::locks::DB_MOVE_REPLICATION;

/// Progress reports of long work: (table, rows done in it, its rows).
pub type Progress<'a> = &'a (dyn Fn(&str, i64, i64) + Send + Sync);

/// Both sides of a move and the tables it carries.
#[derive(Debug, Clone)]
pub struct Mover {
    pub control: Control,
    pub source: Side,
    pub destination: Side,
    pub tables: Vec<Table>,
}

/// One thing verification found (a row differing between the sides), as `db_move_findings`
/// records it.
#[derive(Debug, sqlx::FromRow)]
pub struct Finding {
    pub id: i64,
    #[sqlx(rename = "tbl")]
    pub table: String,
    #[sqlx(rename = "pk")]
    pub key: String,
    pub kind: String,
    pub state: String,
    pub detail: String,
}

impl Mover {
    /// Up to `limit` findings with ids above `after`, in id order.
    pub async fn findings_after(&self, after: i64, limit: i64) -> sqlx::Result<Vec<Finding>> {
        sqlx::query_as(
            "SELECT id, tbl, pk, kind, state, detail FROM db_move_findings \
             WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(&self.source.pool)
        .await
    }

    /// The mover of the started move whose control is `control` on `source_url`.
    pub async fn open(
        control: Control,
        source_url: &str,
        state: &MoveState,
    ) -> anyhow::Result<Self> {
        let mut source = Side::connect(source_url).await?;
        if source.kind == DatabaseKind::Sqlite {
            source.gate = Some(control.writer_pool());
        }
        let destination = Side::connect(&state.destination).await?;
        let tables = common_tables(&source, &destination).await?;
        Ok(Self {
            control,
            source,
            destination,
            tables,
        })
    }

    /// The side queries go to in `phase`, and the other one.
    pub fn authority(&self, phase: Phase) -> (&Side, &Side) {
        if phase.destination_authoritative() {
            (&self.destination, &self.source)
        } else {
            (&self.source, &self.destination)
        }
    }

    fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|table| table.name == name)
    }
}

/// The tables of `source` that `destination` has too, with the columns both have.
async fn common_tables(source: &Side, destination: &Side) -> anyhow::Result<Vec<Table>> {
    let theirs: HashMap<String, Table> = destination
        .tables()
        .await?
        .into_iter()
        .map(|table| (table.name.clone(), table))
        .collect();
    let mut tables = Vec::new();
    for mut table in source.tables().await? {
        let Some(other) = theirs.get(&table.name) else {
            anyhow::bail!(
                "table {} is missing on the destination: is it migrated to the same version?",
                table.name
            );
        };
        if table.key_columns.is_empty() {
            tracing::warn!(table = %table.name, "no primary key: not moved");
            continue;
        }
        let keys: Vec<String> = table
            .key_columns
            .iter()
            .map(|&index| table.columns[index].clone())
            .collect();
        table
            .columns
            .retain(|column| other.columns.contains(column));
        table.key_columns = keys
            .iter()
            .filter_map(|key| table.columns.iter().position(|column| column == key))
            .collect();
        tables.push(table);
    }
    Ok(tables)
}

/// Starts a move to `destination_url`: migrates the destination to this schema, records the
/// move (phase SrcOnly), sets the fences (the source open, the destination closed) and
/// installs the capture triggers on both sides.
pub async fn start(
    control: &Control,
    source_url: &str,
    destination_url: &str,
    schema: &[Migration],
) -> anyhow::Result<Mover> {
    if platform::config::database_kind(destination_url)? != DatabaseKind::Postgres {
        anyhow::bail!("the destination must be a PostgreSQL URL (postgres://…)");
    }
    if same_database(source_url, destination_url) {
        anyhow::bail!("the destination is the source");
    }
    let destination_db = Db::connect_url(destination_url, 2).await?;
    destination_db
        .migrate(schema)
        .await
        .context("migrating the destination")?;
    destination_db.close().await;
    if !control.create(destination_url).await? {
        let state = control.load().await?.context("the move vanished")?;
        if state.destination != destination_url {
            anyhow::bail!("a move to another destination is in progress; finish it first");
        }
    }
    let state = control.load().await?.context("the move vanished")?;
    let mover = Mover::open(control.clone(), source_url, &state).await?;
    // The source serves; the destination takes no application write until a switch opens it.
    mover.source.init_fence(false).await?;
    mover.destination.init_fence(true).await?;
    mover.source.install_capture(&mover.tables).await?;
    mover.destination.install_capture(&mover.tables).await?;
    Ok(mover)
}

fn same_database(left: &str, right: &str) -> bool {
    left.trim_end_matches('/') == right.trim_end_matches('/')
}

/// Runs `work` as the move's task `kind`, recording its start, end and outcome.
pub async fn as_task<T>(
    control: &Control,
    kind: &str,
    work: impl std::future::Future<Output = anyhow::Result<(T, String)>>,
) -> anyhow::Result<T> {
    let started_at = now_millis();
    let mut task = Task {
        kind: kind.to_owned(),
        state: "running".to_owned(),
        message: String::new(),
        started_at,
        ended_at: None,
    };
    control.save_task(&task).await?;
    let outcome = work.await;
    task.ended_at = Some(now_millis());
    match outcome {
        Ok((value, message)) => {
            task.state = "done".to_owned();
            task.message = message;
            control.save_task(&task).await?;
            Ok(value)
        }
        Err(err) => {
            task.state = "failed".to_owned();
            task.message = format!("{err:#}");
            control.save_task(&task).await?;
            Err(err)
        }
    }
}

impl Mover {
    /// Copies every table from the source to the destination in keyset batches, resuming after
    /// the last key a previous copy recorded. Rows already on the destination are kept: the
    /// replicator brings newer versions of whatever changed meanwhile. Each batch holds its
    /// rows at the source until they are written (PostgreSQL: `FOR SHARE`; SQLite: the write
    /// lock, taken by the marker entry), so a change or delete of one of them commits — and is
    /// logged for the replicator — only after the copy wrote it: a deleted row is never
    /// resurrected by a copy that read it just before.
    pub async fn copy(&self, progress: Progress<'_>) -> anyhow::Result<(i64, String)> {
        let state = self
            .control
            .load()
            .await?
            .context("no move has been started")?;
        let mut tables: Vec<TableProgress> = self
            .tables
            .iter()
            .map(|table| {
                state
                    .tables
                    .iter()
                    .find(|done| done.name == table.name)
                    .cloned()
                    .unwrap_or(TableProgress {
                        name: table.name.clone(),
                        rows: 0,
                        copied: 0,
                        done: false,
                        after: None,
                    })
            })
            .collect();
        for progress_of in tables
            .iter_mut()
            .filter(|table| !table.done && table.rows == 0)
        {
            if let Some(table) = self.table(&progress_of.name) {
                progress_of.rows = self.source.count(table).await?;
            }
        }
        self.control.save_tables(&tables).await?;
        let started = std::time::Instant::now();
        let mut copied_now = 0;
        for index in 0..tables.len() {
            let Some(table) = self.table(&tables[index].name) else {
                continue;
            };
            let mut after = tables[index].after.as_deref().map(parse_key).transpose()?;
            while !tables[index].done {
                // The batch's rows cannot change or go at the source until they are on the
                // destination (module docs of `copy`): a row deleted meanwhile is never
                // brought back.
                let turn = self.source.turn().await?;
                let mut hold = self.source.pool.begin().await?;
                if self.source.kind == DatabaseKind::Sqlite {
                    sqlx::query("INSERT INTO db_move_changes (seq, tbl, pk) VALUES ($1, '', '[]')")
                        .bind(MOVER_MARKER)
                        .execute(&mut *hold)
                        .await?;
                }
                let rows = self
                    .source
                    .batch_on(
                        &mut hold,
                        table,
                        Batch {
                            after: after.as_ref(),
                            limit: table.batch_rows(BATCH_ROWS),
                            since: None,
                        },
                        true,
                    )
                    .await?;
                let count = i64::try_from(rows.len())?;
                let last = rows.last().map(|row| row.key(table));
                let mut connection = self.destination.pool.acquire().await?;
                write_rows(&mut connection, table, rows, OnConflict::Keep).await?;
                drop(connection);
                // Releases the locks (SQLite: the marker goes with the rollback).
                hold.rollback().await?;
                drop(turn);
                copied_now += count;
                let entry = &mut tables[index];
                entry.copied += count;
                match last {
                    Some(last) => {
                        entry.after = Some(key_text(&last));
                        after = Some(last);
                    }
                    None => entry.done = true,
                }
                entry.rows = entry.rows.max(entry.copied);
                progress(&entry.name, entry.copied, entry.rows);
                self.control.save_tables(&tables).await?;
            }
        }
        let seconds = started.elapsed().as_secs_f64().max(1e-3);
        Ok((
            copied_now,
            format!(
                "copied {copied_now} rows of {} tables in {seconds:.1} s ({:.0} rows/s)",
                tables.len(),
                copied_now as f64 / seconds
            ),
        ))
    }

    /// One replication pass from `from`'s change log to `to`: the current rows of up to
    /// [`CHANGES_PER_PASS`] logged keys written (or deleted) on `to`, then the entries removed.
    /// Returns how many entries it took. On PostgreSQL an advisory lock keeps passes of several
    /// instances apart, so a later state is never overwritten by an earlier one.
    pub async fn replicate_once(&self, from: &Side, to: &Side) -> anyhow::Result<usize> {
        match from.kind {
            DatabaseKind::Postgres => {
                let mut log = from.pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(REPLICATION_LOCK)
                    .execute(&mut *log)
                    .await?;
                let taken = self.replicate_entries(from, &mut log, to).await?;
                log.commit().await?;
                Ok(taken)
            }
            // A SQLite source serves one process (embedded), whose replicator is the only one;
            // no transaction, which would have to turn from reading into writing while the
            // application writes.
            DatabaseKind::Sqlite => {
                let mut log = from.pool.acquire().await?;
                self.replicate_entries(from, &mut log, to).await
            }
        }
    }

    async fn replicate_entries(
        &self,
        from: &Side,
        log: &mut sqlx::AnyConnection,
        to: &Side,
    ) -> anyhow::Result<usize> {
        let entries: Vec<(i64, String, String)> =
            sqlx::query_as("SELECT seq, tbl, pk FROM db_move_changes ORDER BY seq LIMIT $1")
                .bind(CHANGES_PER_PASS)
                .fetch_all(&mut *log)
                .await?;
        if entries.is_empty() {
            return Ok(0);
        }
        // Exactly the entries read: on PostgreSQL a transaction that took a smaller number may
        // commit after this read, and its entry must stay for the next pass.
        let taken: Vec<i64> = entries.iter().map(|(seq, _, _)| *seq).collect();
        let mut keys: BTreeMap<String, BTreeMap<String, Key>> = BTreeMap::new();
        for (_, table, key) in entries {
            let parsed = parse_key(&key)?;
            keys.entry(table)
                .or_default()
                .insert(key_text(&parsed), parsed);
        }
        let mut changes = Vec::new();
        for (name, keys) in keys {
            let Some(table) = self.table(&name) else {
                continue;
            };
            let keys: Vec<Key> = keys.into_values().collect();
            let rows = super::tables::rows_by_key_on(&mut *log, table, &keys).await?;
            changes.push((table, keys, rows));
        }
        let mut write = QuietWrite::begin(to).await?;
        for (table, keys, rows) in changes {
            apply(&mut write.tx, table, keys, rows).await?;
        }
        write.commit().await?;
        let delete = format!(
            "DELETE FROM db_move_changes WHERE seq IN ({})",
            platform::db::placeholders(1, taken.len())
        );
        let mut delete = sqlx::query(&delete);
        for seq in &taken {
            delete = delete.bind(*seq);
        }
        let turn = from.turn().await?;
        delete.execute(&mut *log).await?;
        drop(turn);
        Ok(taken.len())
    }

    /// Replicates both change logs until both are empty.
    pub async fn drain(&self) -> anyhow::Result<()> {
        loop {
            let taken = self.replicate_once(&self.source, &self.destination).await?
                + self.replicate_once(&self.destination, &self.source).await?;
            if taken == 0 {
                return Ok(());
            }
        }
    }
}

/// Writes `rows` (the current versions of `keys`) and deletes the keys that have none.
async fn apply(
    connection: &mut sqlx::AnyConnection,
    table: &Table,
    keys: Vec<Key>,
    rows: Vec<TableRow>,
) -> anyhow::Result<()> {
    let present: std::collections::HashSet<String> =
        rows.iter().map(|row| key_text(&row.key(table))).collect();
    let gone: Vec<Key> = keys
        .into_iter()
        .filter(|key| !present.contains(&key_text(key)))
        .collect();
    delete_rows(connection, table, &gone).await?;
    write_rows(connection, table, rows, OnConflict::Overwrite).await
}

/// A write transaction on one side that keeps the capture triggers' echo out of the change
/// log. On SQLite it first takes the write lock with the marker entry ([`MOVER_MARKER`], which
/// also lets its writes pass a closed fence) and notes the last entry; before it commits it
/// removes the marker and every entry after the noted one: those are its own writes, captured
/// by the triggers (nobody else writes meanwhile), not changes to copy back. (The mover's
/// PostgreSQL connections fire no triggers at all.)
struct QuietWrite {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    last: Option<i64>,
    _turn: super::tables::Turn,
}

impl QuietWrite {
    async fn begin(side: &Side) -> anyhow::Result<Self> {
        let turn = side.turn().await?;
        let mut tx = side.pool.begin().await?;
        let last = match side.kind {
            DatabaseKind::Sqlite => {
                sqlx::query("INSERT INTO db_move_changes (seq, tbl, pk) VALUES ($1, '', '[]')")
                    .bind(MOVER_MARKER)
                    .execute(&mut *tx)
                    .await?;
                Some(
                    sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM db_move_changes")
                        .fetch_one(&mut *tx)
                        .await?,
                )
            }
            DatabaseKind::Postgres => None,
        };
        Ok(Self {
            tx,
            last,
            _turn: turn,
        })
    }

    async fn commit(mut self) -> anyhow::Result<()> {
        if let Some(last) = self.last {
            sqlx::query("DELETE FROM db_move_changes WHERE seq > $1 OR seq = $2")
                .bind(last)
                .bind(MOVER_MARKER)
                .execute(&mut *self.tx)
                .await?;
        }
        self.tx.commit().await?;
        Ok(())
    }
}

/// What validation found about one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    MissingInDestination,
    ExtraInDestination,
    Different,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingInDestination => "missing_in_destination",
            Self::ExtraInDestination => "extra_in_destination",
            Self::Different => "different",
        }
    }
}

/// How many suspected differences a validation gathers before it confirms them (and again
/// at its end).
const CONFIRM_AT: usize = 10 * BATCH_ROWS;

/// Rows a validation found different in passing, by table (each key once per round of
/// confirmation, whichever direction found it), waiting to be confirmed; and how long
/// confirming has waited so far.
#[derive(Default)]
struct Suspects {
    by_table: BTreeMap<usize, BTreeMap<String, Key>>,
    count: usize,
    waited_ms: i64,
    /// Whether a wait ran out before replication had caught up.
    behind: bool,
}

impl Suspects {
    fn add(&mut self, index: usize, keys: Vec<Key>) {
        if keys.is_empty() {
            return;
        }
        let known = self.by_table.entry(index).or_default();
        for key in keys {
            if known.insert(key_text(&key), key).is_none() {
                self.count += 1;
            }
        }
    }
}

impl Mover {
    /// Compares every table both ways in keyset batches (source → destination: missing or
    /// different rows; destination → source: rows the source does not have), all rows or those
    /// with `utime >= since`. A difference is recorded only if it is still there after the
    /// change logs have been replicated past it (a change in flight is not a finding), with the
    /// authoritative side's fingerprint at that moment for the fixer's guard.
    pub async fn validate(
        &self,
        since: Option<i64>,
        progress: Progress<'_>,
    ) -> anyhow::Result<(Validation, String)> {
        let at = now_millis();
        let state = self
            .control
            .load()
            .await?
            .context("no move has been started")?;
        let after_copy = !state.tables.is_empty() && state.tables.iter().all(|table| table.done);
        let backlog =
            self.source.pending_changes().await? + self.destination.pending_changes().await?;
        sqlx::query("DELETE FROM db_move_findings WHERE state = 'open'")
            .execute(&self.source.pool)
            .await?;
        let mut checked = 0i64;
        let mut findings = 0i64;
        let mut suspects = Suspects::default();
        for (index, table) in self.tables.iter().enumerate() {
            let since = since.filter(|_| table.has_utime);
            for (from, to, forward) in [
                (&self.source, &self.destination, true),
                (&self.destination, &self.source, false),
            ] {
                let mut after: Option<Key> = None;
                let mut done = 0;
                loop {
                    let rows = from
                        .batch(
                            table,
                            Batch {
                                after: after.as_ref(),
                                limit: table.batch_rows(BATCH_ROWS),
                                since,
                            },
                        )
                        .await?;
                    let Some(last) = rows.last() else { break };
                    after = Some(last.key(table));
                    done += i64::try_from(rows.len())?;
                    if forward {
                        checked += i64::try_from(rows.len())?;
                    }
                    suspects.add(index, differing(to, table, rows, forward).await?);
                    if suspects.count >= CONFIRM_AT {
                        findings += self.confirm(&mut suspects).await?;
                    }
                    progress(&table.name, done, 0);
                }
            }
        }
        findings += self.confirm(&mut suspects).await?;
        let validation = Validation {
            at,
            since,
            checked,
            findings,
            phase: Some(state.phase),
            after_copy,
            backlog,
            replication_wait_ms: suspects.waited_ms,
            replication_behind: suspects.behind,
        };
        let message = format!(
            "compared {checked} rows of {} tables both ways: {findings} differences",
            self.tables.len()
        );
        self.control.save_validation(&validation).await?;
        Ok((validation, message))
    }

    /// Re-compares the suspects once the change logs are empty (or the wait ran out) and
    /// records what is still different; empties `suspects`. Returns how many it recorded.
    /// One wait for all of them: a validation under load finds rows in flight in most
    /// batches of the busy tables, and waiting after each batch made it wait that often.
    async fn confirm(&self, suspects: &mut Suspects) -> anyhow::Result<i64> {
        if suspects.count == 0 {
            return Ok(0);
        }
        let phase = self
            .control
            .load()
            .await?
            .map_or(Phase::SrcOnly, |state| state.phase);
        if phase.replicates() {
            let began = std::time::Instant::now();
            suspects.behind |= !self.await_replicated().await?;
            suspects.waited_ms += i64::try_from(began.elapsed().as_millis()).unwrap_or(i64::MAX);
        }
        let mut recorded = 0;
        for (index, keys) in std::mem::take(&mut suspects.by_table) {
            let keys: Vec<Key> = keys.into_values().collect();
            recorded += self.record(&self.tables[index], &keys, phase).await?;
        }
        suspects.count = 0;
        Ok(recorded)
    }

    /// Compares `keys` on both sides now and records each row that differs, with the
    /// authoritative side's fingerprint. Returns how many it recorded.
    async fn record(&self, table: &Table, keys: &[Key], phase: Phase) -> anyhow::Result<i64> {
        let (source_rows, destination_rows) = self.rows_on_both_sides(table, keys).await?;
        let (authority, _) = self.authority(phase);
        let authoritative_is_source = std::ptr::eq(authority, &self.source);
        let mut recorded = 0;
        for key in keys {
            let text = key_text(key);
            let (on_source, on_destination) = (source_rows.get(&text), destination_rows.get(&text));
            let kind = match (on_source, on_destination) {
                (Some(_), None) => FindingKind::MissingInDestination,
                (None, Some(_)) => FindingKind::ExtraInDestination,
                (Some(left), Some(right)) if left != right => FindingKind::Different,
                _ => continue,
            };
            let authoritative = if authoritative_is_source {
                on_source
            } else {
                on_destination
            };
            let fingerprint =
                authoritative.map_or_else(|| "absent".to_owned(), TableRow::fingerprint);
            let detail = match kind {
                FindingKind::Different => describe_difference(table, on_source, on_destination),
                FindingKind::MissingInDestination => "only in the source".to_owned(),
                FindingKind::ExtraInDestination => "only in the destination".to_owned(),
            };
            sqlx::query(
                "INSERT INTO db_move_findings (tbl, pk, kind, fingerprint, state, detail, ctime) \
                 VALUES ($1, $2, $3, $4, 'open', $5, $6)",
            )
            .bind(&table.name)
            .bind(&text)
            .bind(kind.as_str())
            .bind(fingerprint)
            .bind(detail)
            .bind(now_millis())
            .execute(&self.source.pool)
            .await?;
            recorded += 1;
        }
        Ok(recorded)
    }

    /// The rows of `table` with `keys` on the source and on the destination, by key text; read
    /// in batches, as validation reads, since one statement binds every key column of every key,
    /// and both sides at once (a switch's verification runs inside its pause).
    async fn rows_on_both_sides(
        &self,
        table: &Table,
        keys: &[Key],
    ) -> anyhow::Result<(HashMap<String, TableRow>, HashMap<String, TableRow>)> {
        let (mut source, mut destination) = (HashMap::new(), HashMap::new());
        for batch in keys.chunks(table.batch_rows(BATCH_ROWS)) {
            let (on_source, on_destination) = tokio::try_join!(
                self.source.rows_by_key(None, table, batch),
                self.destination.rows_by_key(None, table, batch),
            )?;
            source.extend(index(table, on_source));
            destination.extend(index(table, on_destination));
        }
        Ok((source, destination))
    }

    /// Waits (bounded) until every change logged so far on either side has been replicated
    /// (later ones may still be waiting: under load the logs are never empty). Whether they
    /// were: `false` when the wait ran out first.
    async fn await_replicated(&self) -> anyhow::Result<bool> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for side in [&self.source, &self.destination] {
            let logged: i64 =
                sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM db_move_changes")
                    .fetch_one(&side.pool)
                    .await?;
            loop {
                let waiting: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM db_move_changes WHERE seq <= $1")
                        .bind(logged)
                        .fetch_one(&side.pool)
                        .await?;
                if waiting == 0 {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    return Ok(false);
                }
                // Drained by the serving instances' replicators; polled.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        Ok(true)
    }

    /// The rows a validation begun at `at` found different (fixed since or not), compared
    /// again on both sides: those that still differ, as `table key`. Run inside a switch's
    /// pause, after the drain, when nothing changes any more (Ghostferry's inline verifier):
    /// rows that were merely in flight during the validation compare equal now.
    pub async fn verify_findings(&self, at: i64) -> anyhow::Result<Vec<String>> {
        let found: Vec<(String, String)> =
            sqlx::query_as("SELECT tbl, pk FROM db_move_findings WHERE ctime >= $1 ORDER BY id")
                .bind(at)
                .fetch_all(&self.source.pool)
                .await?;
        let mut keys: BTreeMap<String, Vec<Key>> = BTreeMap::new();
        for (table, key) in found {
            keys.entry(table).or_default().push(parse_key(&key)?);
        }
        let mut differing = Vec::new();
        for (name, keys) in keys {
            let Some(table) = self.table(&name) else {
                continue;
            };
            let (source, destination) = self.rows_on_both_sides(table, &keys).await?;
            for key in &keys {
                let text = key_text(key);
                if source.get(&text) != destination.get(&text) {
                    differing.push(format!("{name} {text}"));
                }
            }
        }
        Ok(differing)
    }

    /// Fixes every open finding from the authoritative side, guarded: the row is locked there,
    /// read again, and written to the other side only if its fingerprint is still the one
    /// validation recorded (a row changed since is left to the replicator and reported as
    /// skipped, never overwritten with what validation saw). A row missing on the
    /// authoritative side is deleted on the other.
    pub async fn fix(&self) -> anyhow::Result<((i64, i64), String)> {
        let phase = self
            .control
            .load()
            .await?
            .context("no move has been started")?
            .phase;
        let (authority, other) = self.authority(phase);
        let mut after = 0i64;
        let (mut fixed, mut skipped) = (0i64, 0i64);
        loop {
            let open: Vec<(i64, String, String, String)> = sqlx::query_as(
                "SELECT id, tbl, pk, fingerprint FROM db_move_findings \
                 WHERE state = 'open' AND id > $1 ORDER BY id LIMIT 200",
            )
            .bind(after)
            .fetch_all(&self.source.pool)
            .await?;
            let Some(last) = open.last() else { break };
            after = last.0;
            for (id, name, key, fingerprint) in open {
                let Some(table) = self.table(&name) else {
                    continue;
                };
                let key = parse_key(&key)?;
                let outcome = self
                    .fix_one(authority, other, table, key, &fingerprint)
                    .await?;
                let (state, detail) = match outcome {
                    true => ("fixed", "overwritten from the authoritative side"),
                    false => ("skipped", "changed since it was compared: validate again"),
                };
                if outcome {
                    fixed += 1;
                } else {
                    skipped += 1;
                }
                sqlx::query("UPDATE db_move_findings SET state = $1, detail = $2 WHERE id = $3")
                    .bind(state)
                    .bind(detail)
                    .bind(id)
                    .execute(&self.source.pool)
                    .await?;
            }
        }
        Ok((
            (fixed, skipped),
            format!("fixed {fixed} rows, skipped {skipped} changed since validation"),
        ))
    }

    async fn fix_one(
        &self,
        authority: &Side,
        other: &Side,
        table: &Table,
        key: Key,
        fingerprint: &str,
    ) -> anyhow::Result<bool> {
        // The authoritative row cannot change while it is locked: SQLite's write lock (taken
        // by a write of the marker kind, removed again), PostgreSQL's row lock.
        let turn = authority.turn().await?;
        let mut lock = authority.pool.begin().await?;
        match authority.kind {
            DatabaseKind::Sqlite => {
                sqlx::query("INSERT INTO db_move_changes (seq, tbl, pk) VALUES ($1, '', '[]')")
                    .bind(MOVER_MARKER)
                    .execute(&mut *lock)
                    .await?;
            }
            DatabaseKind::Postgres => {
                let keys = vec![key.clone()];
                lock_rows(&mut lock, table, &keys).await?;
            }
        }
        let current = authority
            .rows_by_key(Some(&mut *lock), table, std::slice::from_ref(&key))
            .await?
            .pop();
        // (The SQLite marker goes with the rollback below.)
        let now = current
            .as_ref()
            .map_or_else(|| "absent".to_owned(), TableRow::fingerprint);
        if now != fingerprint {
            drop(lock);
            return Ok(false);
        }
        let mut write = QuietWrite::begin(other).await?;
        match current {
            Some(row) => write_rows(&mut write.tx, table, vec![row], OnConflict::Overwrite).await?,
            None => delete_rows(&mut write.tx, table, &[key]).await?,
        }
        write.commit().await?;
        // Releases the lock (and, on SQLite, removes nothing: the marker is rolled back).
        lock.rollback().await?;
        drop(turn);
        Ok(true)
    }
}

async fn lock_rows(
    connection: &mut sqlx::AnyConnection,
    table: &Table,
    keys: &[Key],
) -> anyhow::Result<()> {
    let names: Vec<&str> = table
        .key_columns
        .iter()
        .map(|&index| table.columns[index].as_str())
        .collect();
    let conditions = names
        .iter()
        .enumerate()
        .map(|(index, name)| format!("{name} = ${}", index + 1))
        .collect::<Vec<_>>()
        .join(" AND ");
    for key in keys {
        let sql = format!("SELECT 1 FROM {} WHERE {conditions} FOR UPDATE", table.name);
        let mut query = sqlx::query(&sql);
        for value in key {
            query = value.clone().bind(query);
        }
        query.fetch_optional(&mut *connection).await?;
    }
    Ok(())
}

fn index(table: &Table, rows: Vec<TableRow>) -> HashMap<String, TableRow> {
    rows.into_iter()
        .map(|row| (key_text(&row.key(table)), row))
        .collect()
}

/// Keys of `rows` (read on one side) that `other` has differently or not at all; when
/// `compare_values` is false only missing ones.
async fn differing(
    other: &Side,
    table: &Table,
    rows: Vec<TableRow>,
    compare_values: bool,
) -> anyhow::Result<Vec<Key>> {
    let keys: Vec<Key> = rows.iter().map(|row| row.key(table)).collect();
    let theirs = index(table, other.rows_by_key(None, table, &keys).await?);
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let key = row.key(table);
            match theirs.get(&key_text(&key)) {
                None => Some(key),
                Some(their) if compare_values && *their != row => Some(key),
                Some(_) => None,
            }
        })
        .collect())
}

fn describe_difference(table: &Table, left: Option<&TableRow>, right: Option<&TableRow>) -> String {
    let (Some(left), Some(right)) = (left, right) else {
        return String::new();
    };
    let columns: Vec<&str> = table
        .columns
        .iter()
        .zip(left.values.iter().zip(&right.values))
        .filter(|(_, (left, right))| left != right)
        .map(|(column, _)| column.as_str())
        .collect();
    format!("columns differ: {}", columns.join(", "))
}

-- An online database move (db_move feature). The control row and the acknowledgements live in
-- the database the instances were configured with (the source); the change log and findings
-- exist on both sides.
CREATE TABLE db_move (
    id          BIGINT PRIMARY KEY,
    phase       TEXT NOT NULL,
    target      TEXT NOT NULL,
    destination TEXT NOT NULL,
    epoch       BIGINT NOT NULL,
    stage       TEXT NOT NULL,
    started_at  BIGINT NOT NULL,
    task        TEXT NOT NULL,
    tables      TEXT NOT NULL,
    validation  TEXT NOT NULL,
    utime       BIGINT NOT NULL
);
-- Each serving instance's last sight of the control row: alive while seen_at is recent.
CREATE TABLE db_move_acks (
    instance TEXT PRIMARY KEY,
    epoch    BIGINT NOT NULL,
    stage    TEXT NOT NULL,
    seen_at  BIGINT NOT NULL
);
-- Keys of rows changed by the application since the move started, written by the capture
-- triggers in the changing transaction; the replicator copies those rows across and deletes
-- the entries.
CREATE TABLE db_move_changes (
    seq {{id}},
    tbl TEXT NOT NULL,
    pk  TEXT NOT NULL
);
-- Differences validation found, and what the fixer did with them.
CREATE TABLE db_move_findings (
    id          {{id}},
    tbl         TEXT NOT NULL,
    pk          TEXT NOT NULL,
    kind        TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    state       TEXT NOT NULL,
    detail      TEXT NOT NULL,
    ctime       BIGINT NOT NULL
);
CREATE INDEX db_move_findings_state ON db_move_findings (state, id);

-- Moderation: readers' reports, suspended accounts and the moderators' audit log.
-- moderation_reports: one row per report of a target (kind article | comment | user, id) by a
--   reporter, with the reason (spam | abuse | illegal | other), the reporter's note and the
--   target's content as it was when reported (snapshot); state open | dismissed | actioned,
--   closed by an admin's action (closed_by, closed_at; 0 while open).
CREATE TABLE moderation_reports (
    id          {{id}},
    target_kind TEXT NOT NULL,
    target_id   BIGINT NOT NULL,
    reporter    BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    note        TEXT NOT NULL,
    snapshot    TEXT NOT NULL,
    state       TEXT NOT NULL,
    ctime       BIGINT NOT NULL,
    closed_by   BIGINT NOT NULL,
    closed_at   BIGINT NOT NULL
);
-- One open report per reporter and target (a second answers 409001).
CREATE UNIQUE INDEX moderation_reports_open_once
    ON moderation_reports (target_kind, target_id, reporter) WHERE state = 'open';
-- The review queue: open reports grouped by target.
CREATE INDEX moderation_reports_by_state ON moderation_reports (state, target_kind, target_id);
-- A suspended account: it may sign in and read, not write, until suspended_until (ms; the
-- largest BIGINT for good). Lifting a suspension deletes its row.
CREATE TABLE moderation_suspensions (
    uid             BIGINT PRIMARY KEY,
    suspended_until BIGINT NOT NULL,
    reason          TEXT NOT NULL,
    admin           BIGINT NOT NULL,
    ctime           BIGINT NOT NULL
);
-- Every action an admin took (who, when, what, on what, why, and what it changed).
CREATE TABLE moderation_log (
    id          {{id}},
    admin       BIGINT NOT NULL,
    action      TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id   BIGINT NOT NULL,
    reason      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    ctime       BIGINT NOT NULL
);
CREATE INDEX moderation_log_target ON moderation_log (target_kind, target_id, id);

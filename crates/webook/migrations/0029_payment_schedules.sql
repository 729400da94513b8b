-- Active queries of young payments (payment/watch.rs): queries_done counts the steps of
-- pay_query_after already taken for a pending payment (a step is claimed by a conditional
-- UPDATE from its number to the next, so it is taken once whatever the instances);
-- query_errors and next_query_at back a payment off after the provider failed to answer.
ALTER TABLE payments ADD COLUMN queries_done BIGINT NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN query_errors BIGINT NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN next_query_at BIGINT NOT NULL DEFAULT 0;
-- The watch's read: pending payments at a given step, by id.
CREATE INDEX payments_watch ON payments (status, queries_done, id);

-- Reconciliation's record per bill day (payment/catch_up.rs), a day 'YYYY-MM-DD' in China
-- Standard Time. status: done (compared), not_ready (the provider was still generating the
-- bill: tried again next run) or failed (last_error says why: tried again after next_try_at,
-- ms). attempts counts the comparisons tried.
CREATE TABLE payment_reconcile_days (
    bill_date   TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    last_error  TEXT NOT NULL DEFAULT '',
    next_try_at BIGINT NOT NULL DEFAULT 0,
    ctime       BIGINT NOT NULL,
    utime       BIGINT NOT NULL
);

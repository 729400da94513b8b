-- Answers to creating requests sent with an `Idempotency-Key` header, per user and key, so a
-- retry is answered the same instead of acting twice. status 0: the first request is still
-- running; otherwise the stored answer's HTTP status and body (a JSON envelope). Purged after
-- a day by the purge_idempotency_keys job.
CREATE TABLE idempotency_keys (
    uid          BIGINT NOT NULL,
    idem_key     TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status       BIGINT NOT NULL,
    body         TEXT NOT NULL,
    ctime        BIGINT NOT NULL,
    PRIMARY KEY (uid, idem_key)
);
CREATE INDEX idempotency_keys_ctime ON idempotency_keys (ctime);

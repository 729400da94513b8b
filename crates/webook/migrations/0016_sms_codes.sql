-- SMS login codes (embedded mode; cluster mode keeps codes in Redis) and the retry queue of
-- codes no provider took (both modes).
--
-- sms_codes: one live code per phone and purpose. code_hash is a keyed digest (HMAC-SHA256
-- under the server's access-token secret) of phone and code: the code itself is never stored.
-- generation identifies the code issued by one send, so a retry only replaces that one.
-- attempts_left counts down on wrong tries; at 0 the code is dead. sent_at enforces the resend
-- interval; rows past expires_at are purged.
CREATE TABLE sms_codes (
    phone         TEXT NOT NULL,
    purpose       TEXT NOT NULL,
    code_hash     TEXT NOT NULL,
    generation    TEXT NOT NULL,
    attempts_left BIGINT NOT NULL,
    sent_at       BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (phone, purpose)
);
CREATE INDEX sms_codes_expires_at ON sms_codes (expires_at);

-- A send no provider took. It holds no code: a retry draws a new one, replaces the digest of
-- `generation` (unless a newer send or a login replaced it) and sends that. Worked by the
-- durable sms_code_retries job until sent, superseded, or past expires_at.
CREATE TABLE sms_code_retries (
    id              {{id}},
    phone           TEXT NOT NULL,
    purpose         TEXT NOT NULL,
    generation      TEXT NOT NULL,
    expires_at      BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    attempts        BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    ctime           BIGINT NOT NULL
);
CREATE INDEX sms_code_retries_due ON sms_code_retries (next_attempt_at, id);

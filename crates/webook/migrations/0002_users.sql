-- Accounts. Emails are stored normalised (trimmed, lower case), so the unique constraint is
-- the one arbiter of "email taken", also under concurrent sign-ups. Phone is unique when set
-- (several NULLs are allowed on both engines). birthday is 'YYYY-MM-DD' or '' (not given).
CREATE TABLE users (
    id       {{id}},
    email    TEXT UNIQUE,
    password TEXT NOT NULL,
    phone    TEXT UNIQUE,
    nickname TEXT NOT NULL DEFAULT '',
    birthday TEXT NOT NULL DEFAULT '',
    about_me TEXT NOT NULL DEFAULT '',
    ctime    BIGINT NOT NULL,
    utime    BIGINT NOT NULL
);

-- Durable copy of session state for embedded mode (cluster mode keeps it in Redis): the current
-- refresh-token generation and whether the session was revoked. Rows exist only for sessions
-- that were refreshed or revoked; they are useless after expires_at (ms) and purged.
CREATE TABLE sessions (
    ssid       TEXT PRIMARY KEY,
    uid        BIGINT NOT NULL,
    generation BIGINT NOT NULL,
    revoked    BIGINT NOT NULL DEFAULT 0,
    expires_at BIGINT NOT NULL
);
CREATE INDEX sessions_expires_at ON sessions (expires_at);

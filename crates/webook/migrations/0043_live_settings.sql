-- Live settings: values admins set while the site runs (rate limits, switches, the log filter),
-- on top of the start-up configuration of every instance. value is JSON; admin 0 with via
-- `cli:<user>@<host>` is the command line. live_settings_log is the audit trail of every change
-- (old_value NULL: the key was at its start-up value; new_value NULL: set back to it).
-- live_settings_version: bumped in the transaction of every change, so each instance notices
-- one with a point read per poll; the bump also serialises changes, so every change is checked
-- together with the values already stored.
CREATE TABLE live_settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    admin BIGINT NOT NULL,
    via   TEXT NOT NULL,
    utime BIGINT NOT NULL
);
CREATE TABLE live_settings_log (
    id        {{id}},
    key       TEXT NOT NULL,
    old_value TEXT,
    new_value TEXT,
    admin     BIGINT NOT NULL,
    via       TEXT NOT NULL,
    ctime     BIGINT NOT NULL
);
CREATE TABLE live_settings_version (
    id      BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO live_settings_version (id, version) VALUES (1, 0);

-- Facts about the database itself, one row per name: when its schema was created and which
-- webook version last migrated it. Written by `Db::migrate`, read by operators.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    utime BIGINT NOT NULL
);

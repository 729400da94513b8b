-- Sign-in identities (SQLite): a password becomes optional (accounts made by SMS or WeChat have
-- none until they set one) and WeChat identities are added, nullable-unique like email and
-- phone (several NULLs are allowed; '' is never stored, so an empty value cannot collide).
-- SQLite cannot drop a NOT NULL, so the table is rebuilt, with foreign keys off (tables refer to
-- users by name) and the AUTOINCREMENT position kept, in one transaction of its own.
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE users_rebuilt (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    email           TEXT UNIQUE,
    password        TEXT,
    phone           TEXT UNIQUE,
    wechat_open_id  TEXT UNIQUE,
    wechat_union_id TEXT UNIQUE,
    nickname        TEXT NOT NULL DEFAULT '',
    birthday        TEXT NOT NULL DEFAULT '',
    about_me        TEXT NOT NULL DEFAULT '',
    ctime           BIGINT NOT NULL,
    utime           BIGINT NOT NULL
);
INSERT INTO users_rebuilt (id, email, password, phone, nickname, birthday, about_me, ctime, utime)
    SELECT id, NULLIF(email, ''), NULLIF(password, ''), NULLIF(phone, ''), nickname, birthday,
           about_me, ctime, utime
    FROM users;
CREATE TEMP TABLE users_position AS SELECT seq FROM sqlite_sequence WHERE name = 'users';
DROP TABLE users;
ALTER TABLE users_rebuilt RENAME TO users;
DELETE FROM sqlite_sequence WHERE name IN ('users', 'users_rebuilt');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'users', MAX(COALESCE((SELECT MAX(seq) FROM temp.users_position), 0),
                        COALESCE((SELECT MAX(id) FROM users), 0));
DROP TABLE temp.users_position;
COMMIT;
PRAGMA foreign_keys = ON;

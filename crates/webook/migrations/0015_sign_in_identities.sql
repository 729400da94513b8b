-- Sign-in identities (PostgreSQL): a password becomes optional (accounts made by SMS or WeChat
-- have none until they set one) and WeChat identities are added, nullable-unique like email and
-- phone (several NULLs are allowed; '' is never stored, so an empty value cannot collide).
-- SQLite's version of this migration rebuilds the table: 0015_sign_in_identities.sqlite.sql.
ALTER TABLE users ALTER COLUMN password DROP NOT NULL;
ALTER TABLE users ADD COLUMN wechat_open_id TEXT UNIQUE;
ALTER TABLE users ADD COLUMN wechat_union_id TEXT UNIQUE;
UPDATE users SET phone = NULL WHERE phone = '';
UPDATE users SET email = NULL WHERE email = '';

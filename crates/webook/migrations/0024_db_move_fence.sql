-- The database move's switch as a durable task (db_move feature): who coordinates it and until
-- when (a lease any instance may take over once it runs out), which instances must acknowledge
-- the pause (fixed when it begins), when it began, and how the last switch ended.
ALTER TABLE db_move ADD COLUMN members TEXT NOT NULL DEFAULT '[]';
ALTER TABLE db_move ADD COLUMN coordinator TEXT NOT NULL DEFAULT '';
ALTER TABLE db_move ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE db_move ADD COLUMN paused_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE db_move ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
-- Raised by every switch and every takeover: the token each fence write carries, so a deposed
-- coordinator can no longer move a fence its successor has set.
ALTER TABLE db_move ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0;
-- The write fence of this database during a move: while closed, the capture triggers refuse
-- every application write (the mover's own writes pass). Exactly one row (id 1); `token` is
-- the fence token of the last write, which refuses an older one.
CREATE TABLE db_move_fence (
    id     BIGINT PRIMARY KEY,
    closed BIGINT NOT NULL,
    token  BIGINT NOT NULL
);

-- Comments on any object (biz + biz_id: 'article' + published_articles.id, …). A top-level
-- comment has root_id = parent_id = 0; a reply has its thread's top-level comment as root_id and
-- the comment it answers as parent_id (a reply to a reply keeps the root), so a thread is two
-- levels to list however deep the conversation goes.
-- child_cnt: rows whose parent_id is this one; decides tombstone or removal on delete, and is
--   moved in the child's transaction (locking this row), so a reply and its parent's deletion
--   serialise.
-- reply_cnt: top-level rows only: replies in the thread that are not deleted.
-- deleted: 1 = tombstone (content cleared; kept while replies point at it).
-- No foreign keys or cascades: deleting never takes a reply thread with it.
CREATE TABLE comments (
    id        {{id}},
    biz       TEXT NOT NULL,
    biz_id    BIGINT NOT NULL,
    uid       BIGINT NOT NULL,
    root_id   BIGINT NOT NULL,
    parent_id BIGINT NOT NULL,
    content   TEXT NOT NULL,
    deleted   BIGINT NOT NULL,
    child_cnt BIGINT NOT NULL,
    reply_cnt BIGINT NOT NULL,
    ctime     BIGINT NOT NULL,
    utime     BIGINT NOT NULL
);
-- An object's top-level comments, newest first (root_id = 0), keyset by id.
CREATE INDEX comments_thread ON comments (biz, biz_id, root_id, id);
-- A thread's replies, oldest first, keyset by id (and the first replies of each root).
CREATE INDEX comments_replies ON comments (root_id, id);

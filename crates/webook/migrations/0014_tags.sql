-- Tags (API.md → Tags): each user's own labels, and which of them an owner put on their objects.
--
-- name is the tag as its owner first wrote it, trimmed; name_key is that name Unicode-lowercased
-- (in Rust, crate::tag::model::tag_key), so " Rust " and "rust" are one tag of their owner and
-- another owner's "rust" is another tag. Creating is one upsert on (uid, name_key). Tags are
-- never deleted (no route does), so an id once answered stays valid.
CREATE TABLE tags (
    id       {{id}},
    uid      BIGINT NOT NULL,
    name     TEXT NOT NULL,
    name_key TEXT NOT NULL,
    ctime    BIGINT NOT NULL,
    utime    BIGINT NOT NULL,
    UNIQUE (uid, name_key)
);

-- Tag tid of owner uid on object (biz, biz_id). Only the object's owner tags it, so uid is also
-- the object's owner; it is kept here so a replace deletes the owner's rows without a join.
-- The primary key serves "the tags on an object"; the index pages an object kind by tag, newest
-- id first (/tags/:id/articles).
CREATE TABLE tag_bizs (
    tid    BIGINT NOT NULL,
    uid    BIGINT NOT NULL,
    biz    TEXT NOT NULL,
    biz_id BIGINT NOT NULL,
    ctime  BIGINT NOT NULL,
    PRIMARY KEY (biz, biz_id, tid)
);
CREATE INDEX tag_bizs_by_tag ON tag_bizs (tid, biz, biz_id);

-- One row per object whose tags were ever set through the API: the attach transaction upserts
-- it before anything else, and the upsert locks the row (PostgreSQL), so two replaces of one
-- object's tags run one after the other and the object ends with one of their sets, never a
-- union. (SQLite has a single writer: its transactions never interleave.) utime: last replace.
CREATE TABLE tagged_objects (
    biz    TEXT NOT NULL,
    biz_id BIGINT NOT NULL,
    utime  BIGINT NOT NULL,
    PRIMARY KEY (biz, biz_id)
);

-- Reads, likes and collects of any object, keyed by biz ('article', later 'comment', …) + biz_id.
CREATE TABLE interactives (
    id          {{id}},
    biz         TEXT NOT NULL,
    biz_id      BIGINT NOT NULL,
    read_cnt    BIGINT NOT NULL DEFAULT 0,
    like_cnt    BIGINT NOT NULL DEFAULT 0,
    collect_cnt BIGINT NOT NULL DEFAULT 0,
    ctime       BIGINT NOT NULL,
    utime       BIGINT NOT NULL,
    UNIQUE (biz, biz_id)
);

-- One row per (user, object) ever liked; status 1 liked, 0 unliked (soft delete).
CREATE TABLE user_likes (
    id     {{id}},
    uid    BIGINT NOT NULL,
    biz    TEXT NOT NULL,
    biz_id BIGINT NOT NULL,
    status BIGINT NOT NULL,
    ctime  BIGINT NOT NULL,
    utime  BIGINT NOT NULL,
    UNIQUE (uid, biz, biz_id)
);

-- A user's named folders of collected objects; cid 0 is the default folder and has no row.
CREATE TABLE collections (
    id    {{id}},
    uid   BIGINT NOT NULL,
    name  TEXT NOT NULL,
    ctime BIGINT NOT NULL,
    utime BIGINT NOT NULL,
    UNIQUE (uid, name)
);

-- One row per (user, object) ever collected, in folder cid; status 1 collected, 0 removed.
CREATE TABLE user_collects (
    id     {{id}},
    uid    BIGINT NOT NULL,
    biz    TEXT NOT NULL,
    biz_id BIGINT NOT NULL,
    cid    BIGINT NOT NULL,
    status BIGINT NOT NULL,
    ctime  BIGINT NOT NULL,
    utime  BIGINT NOT NULL,
    UNIQUE (uid, biz, biz_id)
);

-- Ids of stream entries already applied, per consumer group: a redelivered entry (a consumer
-- died after committing, before acknowledging) is recognised and not counted twice. Purged after
-- a day, far longer than any entry stays pending.
CREATE TABLE consumed_events (
    group_name TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    ctime      BIGINT NOT NULL,
    PRIMARY KEY (group_name, event_id)
);
CREATE INDEX consumed_events_ctime ON consumed_events (ctime);

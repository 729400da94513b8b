-- Follow relations: one row per (follower, followee) ever followed; status 1 following, 0
-- cancelled (soft state, so a repeat is an idempotent upsert). utime is when the current state
-- began: lists show the newest follows first, by (utime, id).
CREATE TABLE follows (
    id       {{id}},
    follower BIGINT NOT NULL,
    followee BIGINT NOT NULL,
    status   BIGINT NOT NULL,
    ctime    BIGINT NOT NULL,
    utime    BIGINT NOT NULL,
    UNIQUE (follower, followee)
);
-- "Whom X follows" and "who follows X", newest first; the second also drives the fan-out.
CREATE INDEX follows_followees ON follows (follower, status, utime, id);
CREATE INDEX follows_followers ON follows (followee, status, utime, id);

-- Exact counts, changed in the follow's transaction and only on a real transition.
CREATE TABLE follow_counts (
    uid       BIGINT PRIMARY KEY,
    followers BIGINT NOT NULL DEFAULT 0,
    followees BIGINT NOT NULL DEFAULT 0,
    utime     BIGINT NOT NULL
);

-- Everything that appears in feeds, once per item. kind: article (actor published article_id;
-- for the actor's followers), like (actor liked recipient's article_id), follow (actor followed
-- recipient), comment (actor commented comment_id, text in detail, for recipient).
-- dedup_key makes every consumer idempotent (e.g. 'article:42', 'like:7:article:42').
-- delivery: 0 fan-out in progress (fanout_time/fanout_id: the last follower row done, by the
-- follower list's order), 1 pushed to inboxes, 2 pulled: stays in the author's outbox and is
-- merged into followers' feeds at read time (author above feed_push_threshold).
CREATE TABLE feed_events (
    id          {{id}},
    kind        TEXT NOT NULL,
    actor       BIGINT NOT NULL,
    recipient   BIGINT NOT NULL,
    article_id  BIGINT NOT NULL,
    comment_id  BIGINT NOT NULL,
    detail      TEXT NOT NULL,
    dedup_key   TEXT NOT NULL UNIQUE,
    delivery    BIGINT NOT NULL,
    fanout_time BIGINT NOT NULL,
    fanout_id   BIGINT NOT NULL,
    ctime       BIGINT NOT NULL
);
-- An author's outbox, newest first: the read-time merge (delivery 2) and the back-fill on
-- follow (delivery 0 and 1).
CREATE INDEX feed_events_outbox ON feed_events (actor, kind, delivery, ctime, id);

-- Authors that have pulled items: the only followees a reader's feed merges at read time.
CREATE TABLE feed_pull_authors (
    uid   BIGINT PRIMARY KEY,
    ctime BIGINT NOT NULL
);

-- Each user's inbox: one row per pushed item, ordered like every feed by (ctime, event_id).
-- Capped per user by the prune job (feed_inbox_cap).
CREATE TABLE feed_inbox (
    uid      BIGINT NOT NULL,
    event_id BIGINT NOT NULL,
    actor    BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    ctime    BIGINT NOT NULL,
    PRIMARY KEY (uid, event_id)
);
CREATE INDEX feed_inbox_page ON feed_inbox (uid, ctime, event_id);
CREATE INDEX feed_inbox_event ON feed_inbox (event_id);

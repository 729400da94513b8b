-- Notifications (API.md → Notifications): each user's inbox of what happened to them, written
-- by the notifications feature's consumers from outbox events, never by the request itself.
--
-- notifications: one row per thing shown. `group_key` makes the writes idempotent and groups
--   likes and collects: `{article}:{day}` for likes and collects (one row per article and UTC day,
--   actor_cnt distinct actors), `{comment}` for replies and comments, `{follower}` for follows,
--   `{rid}` for rewards. kind: reply, comment, like, collect, follow, reward.
--   article_id / comment_id: what it is about (0: nothing); excerpt: the comment's first
--   characters as written (plain; escaped when shown). amt: a reward's fen. is_read: 0 or 1.
--   utime: the last change that put it on top (a new actor), the order of the list.
CREATE TABLE notifications (
    id         {{id}},
    recipient  BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    group_key  TEXT NOT NULL,
    article_id BIGINT NOT NULL,
    comment_id BIGINT NOT NULL,
    excerpt    TEXT NOT NULL,
    amt        BIGINT NOT NULL,
    actor_cnt  BIGINT NOT NULL,
    is_read    BIGINT NOT NULL,
    ctime      BIGINT NOT NULL,
    utime      BIGINT NOT NULL
);
CREATE UNIQUE INDEX notifications_group ON notifications (recipient, kind, group_key);
-- The list, newest first, keyset on (utime, id).
CREATE INDEX notifications_page ON notifications (recipient, utime, id);
-- The unread count: an index-only count of the caller's unread rows.
CREATE INDEX notifications_unread ON notifications (recipient, is_read);
-- What a withdrawal or a comment's deletion removes, and what retention deletes.
CREATE INDEX notifications_article ON notifications (article_id);
CREATE INDEX notifications_comment ON notifications (comment_id);
CREATE INDEX notifications_utime ON notifications (utime);

-- notification_sources: the last known state of each source of a notification — one actor's
-- like, collect, follow, comment or reward towards a recipient (`source` like, collect, follow,
-- comment, reward; `subject_id` the article, 0, the comment, the reward). `time` is the time of
-- the newest event applied, so an older event delivered late changes nothing; `on_flag` whether
-- it stands; `notification_id` the row it counts in (0, or a row since deleted: none). The
-- latest actors of a row are its sources that stand, newest first.
CREATE TABLE notification_sources (
    recipient       BIGINT NOT NULL,
    source          TEXT NOT NULL,
    subject_id      BIGINT NOT NULL,
    actor_id        BIGINT NOT NULL,
    on_flag         BIGINT NOT NULL,
    time            BIGINT NOT NULL,
    notification_id BIGINT NOT NULL,
    PRIMARY KEY (recipient, source, subject_id, actor_id)
);
CREATE INDEX notification_sources_row ON notification_sources (notification_id, on_flag, time);
CREATE INDEX notification_sources_time ON notification_sources (time);

-- The kinds each user turned off: nothing new of those kinds is written for them.
CREATE TABLE notification_muted (
    uid  BIGINT NOT NULL,
    kind TEXT NOT NULL,
    PRIMARY KEY (uid, kind)
);

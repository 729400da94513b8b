-- Comments on each object, next to its other counters: changed in the comment's own transaction
-- (the comments feature), read with the other counters (the article reader view, the feed).
ALTER TABLE interactives ADD COLUMN comment_cnt BIGINT NOT NULL DEFAULT 0;

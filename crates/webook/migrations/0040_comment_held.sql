-- Comments the word lists hold for review: written hidden (deleted = 2, out of the counts, no
-- events) with held = 1 and why (held_reason); a moderator's restore publishes one (counts and
-- events follow, as after any restore), a delete rejects it. 0 and '' for every other comment.
ALTER TABLE comments ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE comments ADD COLUMN held_reason TEXT NOT NULL DEFAULT '';
-- The held queue, the longest waiting first.
CREATE INDEX comments_held ON comments (held, id);

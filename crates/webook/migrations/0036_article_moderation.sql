-- Moderation: a reader copy an operator hid (status 4) or removed (status 5) says why, for its
-- author's views; empty otherwise. Readers see neither status (every reader query asks for 2).
ALTER TABLE published_articles ADD COLUMN hidden_reason TEXT NOT NULL DEFAULT '';
-- held: 1 while the word lists hold the copy for review (status 4; its author may fix it and
-- publish again), 0 when a moderator hid it (its author may not).
ALTER TABLE published_articles ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
-- restore_to: the status a moderator's restore gives back: 2 (published) or 3 (withdrawn by its
-- author, before or after the hide).
ALTER TABLE published_articles ADD COLUMN restore_to BIGINT NOT NULL DEFAULT 2;

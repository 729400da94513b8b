-- Moderation: a reader copy an operator hid (status 4) or removed (status 5) says why, for its
-- author's views; empty otherwise. Readers see neither status (every reader query asks for 2).
ALTER TABLE published_articles ADD COLUMN hidden_reason TEXT NOT NULL DEFAULT '';

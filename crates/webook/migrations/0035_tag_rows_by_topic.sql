-- A topic's articles in order (TagStore::topic_articles): each tag row carries its tag's key, so
-- a topic's newest page is a range of tag_bizs_by_topic, read newest first until the page is
-- full, however many articles carry the topic or how few. name_key is written with the row (an
-- insert-select from tags), by the start-up re-key when keys change, and, for rows an older
-- binary inserted without it (''), by every start-up's repair (TagStore::key_tag_rows).
ALTER TABLE tag_bizs ADD COLUMN name_key TEXT NOT NULL DEFAULT '';
UPDATE tag_bizs SET name_key = (SELECT t.name_key FROM tags t WHERE t.id = tag_bizs.tid);
CREATE INDEX tag_bizs_by_topic ON tag_bizs (name_key, biz, biz_id);

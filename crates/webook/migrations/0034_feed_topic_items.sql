-- The feed's index of topics (FeedStore::topic_heads): a row per topic (tag key) an article item
-- carries, in feed order, so a followed topic's newest items are a range of this primary key
-- instead of a read and sort of every article carrying the topic. Kept by the feed's consumers:
-- when an article is published (article_published) and when its tags are replaced
-- (tags_changed), its rows are written again from the tags it carries then. A row a removed tag
-- left (until its event is applied) shows nothing: a page still checks that the article carries
-- a topic the reader follows. Filled here from the items and tags already present.
CREATE TABLE feed_topic_items (
    topic      TEXT NOT NULL,
    ctime      BIGINT NOT NULL,
    event_id   BIGINT NOT NULL,
    article_id BIGINT NOT NULL,
    PRIMARY KEY (topic, ctime, event_id)
);
CREATE INDEX feed_topic_items_article ON feed_topic_items (article_id);

INSERT INTO feed_topic_items (topic, ctime, event_id, article_id)
SELECT DISTINCT t.name_key, e.ctime, e.id, e.article_id
FROM feed_events e
JOIN tag_bizs b ON b.biz = 'article' AND b.biz_id = e.article_id
JOIN tags t ON t.id = b.tid
WHERE e.kind = 'article';

-- Feed items by the article they are about: a withdrawal takes the article's like and comment
-- notices out of the inboxes, and a republication puts those whose like or comment still
-- stands back.
CREATE INDEX feed_events_article ON feed_events (article_id, kind);

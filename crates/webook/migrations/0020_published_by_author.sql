-- One author's published articles, newest first publication first (GET /articles/pub?author=):
-- a range of this index, like the latest articles' range of published_articles_ctime.
CREATE INDEX published_articles_author ON published_articles (author_id, ctime, id);

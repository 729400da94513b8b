-- What changed in the reader copies lately: the public site's kept sitemaps drop an article
-- withdrawn, hidden or removed since they were read (one indexed range per sitemap served).
CREATE INDEX published_articles_utime ON published_articles (utime);

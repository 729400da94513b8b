-- Articles: the author's copy (drafts, edited freely) and the reader copy (what readers see),
-- sharing the id. Table and column names are a contract operators' scripts rely on.
-- status: 1 unpublished, 2 published, 3 private (withdrawn). Times are epoch milliseconds.
-- abstract is derived from content at save time (first 128 characters of its text, HTML-escaped)
-- so lists never read whole contents.
CREATE TABLE articles (
    id        {{id}},
    author_id BIGINT NOT NULL REFERENCES users (id),
    title     TEXT NOT NULL,
    content   TEXT NOT NULL,
    abstract  TEXT NOT NULL,
    status    BIGINT NOT NULL,
    ctime     BIGINT NOT NULL,
    utime     BIGINT NOT NULL
);
-- The author's list: newest update first.
CREATE INDEX articles_author_utime ON articles (author_id, utime, id);

-- ctime is the first publication and never changes on republish (the hot list ranks by it);
-- utime is the last publish or withdrawal.
CREATE TABLE published_articles (
    id        BIGINT PRIMARY KEY REFERENCES articles (id),
    author_id BIGINT NOT NULL REFERENCES users (id),
    title     TEXT NOT NULL,
    content   TEXT NOT NULL,
    abstract  TEXT NOT NULL,
    status    BIGINT NOT NULL,
    ctime     BIGINT NOT NULL,
    utime     BIGINT NOT NULL
);
CREATE INDEX published_articles_ctime ON published_articles (ctime, id);

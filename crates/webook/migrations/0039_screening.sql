-- Screening: the moderators' word lists (words one per line, as written), each refusing or
-- holding for review the writes whose text contains one of them; who edited a list last, when.
-- screening_version: bumped in the transaction of every edit, so each instance notices a
-- change with one point read per poll and rebuilds its matcher.
CREATE TABLE screening_word_lists (
    name   TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    words  TEXT NOT NULL,
    admin  BIGINT NOT NULL,
    utime  BIGINT NOT NULL
);
CREATE TABLE screening_version (
    id      BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO screening_version (id, version) VALUES (1, 0);

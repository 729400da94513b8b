-- Topics a reader follows (API.md → Topics): `topic` is the topic's normalised name, the key of
-- every owner's tags of that name (tags.name_key). The feed merges the articles carrying a tag of
-- a followed topic with the rest of the reader's feed (pulled on read, as the big authors' are),
-- and shows them while the reader follows the topic.
CREATE TABLE topic_follows (
    uid   BIGINT NOT NULL,
    topic TEXT NOT NULL,
    ctime BIGINT NOT NULL,
    PRIMARY KEY (uid, topic)
);

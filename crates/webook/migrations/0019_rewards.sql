-- Rewards: a reader pays an article's author. status: init → payed | failed, following the
-- payment (payments.biz = 'reward', biz_id = rewards.id). The article's title is kept as it
-- was when rewarded, for the lists.
CREATE TABLE rewards (
    id            {{id}},
    payer_id      BIGINT NOT NULL,
    author_id     BIGINT NOT NULL,
    article_id    BIGINT NOT NULL,
    article_title TEXT NOT NULL,
    amt           BIGINT NOT NULL,
    status        TEXT NOT NULL,
    trade_no      TEXT NOT NULL,
    expires_at    BIGINT NOT NULL,
    ctime         BIGINT NOT NULL,
    utime         BIGINT NOT NULL
);
CREATE INDEX rewards_payer ON rewards (payer_id, id);
CREATE INDEX rewards_author ON rewards (author_id, id);
CREATE INDEX rewards_open ON rewards (payer_id, article_id, amt, status);

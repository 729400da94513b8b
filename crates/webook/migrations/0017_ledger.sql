-- The double-entry ledger. An account holds money in integer fen: a user's balance, the
-- platform's revenue, the clearing account incoming payments pass through. Entries are
-- immutable; each posting is a balanced set of entries (their amounts sum to 0) written in one
-- transaction with the balances it changes, so a balance always equals the sum of its entries.
-- (biz, biz_id, account_id) is unique: posting the same business event again writes nothing.
CREATE TABLE accounts (
    id       {{id}},
    kind     TEXT NOT NULL,
    owner_id BIGINT NOT NULL,
    currency TEXT NOT NULL DEFAULT 'CNY',
    balance  BIGINT NOT NULL DEFAULT 0,
    ctime    BIGINT NOT NULL,
    utime    BIGINT NOT NULL,
    UNIQUE (kind, owner_id)
);

CREATE TABLE account_entries (
    id         {{id}},
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    biz        TEXT NOT NULL,
    biz_id     BIGINT NOT NULL,
    amt        BIGINT NOT NULL,
    memo       TEXT NOT NULL DEFAULT '',
    ctime      BIGINT NOT NULL,
    UNIQUE (biz, biz_id, account_id)
);
CREATE INDEX account_entries_account ON account_entries (account_id, id);

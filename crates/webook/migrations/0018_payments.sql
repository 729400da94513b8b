-- Payments: one order at the payment provider per thing sold (biz, biz_id), known to the
-- provider by trade_no. status: pending → succeeded | failed, changed once, together with the
-- outbox event that tells the seller (payment_succeeded / payment_failed).
CREATE TABLE payments (
    id          {{id}},
    trade_no    TEXT NOT NULL UNIQUE,
    biz         TEXT NOT NULL,
    biz_id      BIGINT NOT NULL,
    provider    TEXT NOT NULL,
    amt         BIGINT NOT NULL,
    currency    TEXT NOT NULL DEFAULT 'CNY',
    description TEXT NOT NULL,
    status      TEXT NOT NULL,
    code_url    TEXT,
    txn_id      TEXT UNIQUE,
    expires_at  BIGINT NOT NULL,
    paid_at     BIGINT,
    ctime       BIGINT NOT NULL,
    utime       BIGINT NOT NULL,
    UNIQUE (biz, biz_id)
);
-- The sweep of expired pending payments, by id.
CREATE INDEX payments_pending ON payments (status, expires_at, id);
-- A day's payments for the bill comparison.
CREATE INDEX payments_paid ON payments (paid_at, id);

-- What reconciliation (and the notification checks) found: unique per bill day, kind and
-- trade, so a repeated run records nothing twice. status: open (for a person), fixed
-- (repaired automatically) or resolved (by a person).
CREATE TABLE payment_discrepancies (
    id           {{id}},
    bill_date    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    trade_no     TEXT NOT NULL,
    provider_amt BIGINT,
    our_amt      BIGINT,
    detail       TEXT NOT NULL,
    status       TEXT NOT NULL,
    note         TEXT NOT NULL DEFAULT '',
    ctime        BIGINT NOT NULL,
    utime        BIGINT NOT NULL,
    UNIQUE (bill_date, kind, trade_no)
);
CREATE INDEX payment_discrepancies_status ON payment_discrepancies (status, id);

-- The fake provider's own books (what WeChat keeps on its side): its orders and their state.
CREATE TABLE fake_pay_orders (
    trade_no       TEXT PRIMARY KEY,
    description    TEXT NOT NULL,
    amt            BIGINT NOT NULL,
    state          TEXT NOT NULL,
    transaction_id TEXT,
    expires_at     BIGINT NOT NULL,
    paid_at        BIGINT,
    ctime          BIGINT NOT NULL
);
CREATE INDEX fake_pay_orders_paid ON fake_pay_orders (paid_at);

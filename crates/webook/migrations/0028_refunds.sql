-- Refunds: a full refund of a payment, known to the provider by refund_no (out_refund_no, so
-- asking again is safe). status: requested (asked, outcome unknown) → processing → succeeded |
-- failed (closed: nothing moved), or abnormal (the provider could not pay it back yet; it may
-- still succeed) → succeeded. At most one refund of a trade is live (not failed); a failed one
-- may be asked again under a new refund_no. requested_via: who asked outside the admin API
-- (`cli:user@host`). The refund's success, the payment's `refunded` status, the ledger's
-- reversal (biz 'refund', biz_id = id) and the outbox event are one transaction.
CREATE TABLE payment_refunds (
    id                 {{id}},
    refund_no          TEXT NOT NULL UNIQUE,
    trade_no           TEXT NOT NULL,
    biz                TEXT NOT NULL,
    biz_id             BIGINT NOT NULL,
    amt                BIGINT NOT NULL,
    reason             TEXT NOT NULL,
    status             TEXT NOT NULL,
    provider_refund_id TEXT,
    requested_by       BIGINT NOT NULL,
    requested_via      TEXT NOT NULL DEFAULT '',
    allow_negative     BIGINT NOT NULL DEFAULT 0,
    detail             TEXT NOT NULL DEFAULT '',
    refunded_at        BIGINT,
    ctime              BIGINT NOT NULL,
    utime              BIGINT NOT NULL
);
CREATE UNIQUE INDEX payment_refunds_live ON payment_refunds (trade_no) WHERE status <> 'failed';
CREATE INDEX payment_refunds_open ON payment_refunds (status, id);
CREATE INDEX payment_refunds_done ON payment_refunds (refunded_at, id);

-- Who acted on a discrepancy, and how (credit, refund, resolve): the audit of operators' fixes.
-- status 'acting' while a person's action is being carried out (claimed, so two people cannot
-- both act on one).
ALTER TABLE payment_discrepancies ADD COLUMN action TEXT NOT NULL DEFAULT '';
ALTER TABLE payment_discrepancies ADD COLUMN acted_by BIGINT;
ALTER TABLE payment_discrepancies ADD COLUMN acted_via TEXT NOT NULL DEFAULT '';

-- A pending payment the provider reports in a state we cannot settle (refunded, another
-- amount, stuck): parked for a person, no longer queried by the sweep.
ALTER TABLE payments ADD COLUMN parked_at BIGINT;

-- The fake provider's refunds (what WeChat keeps on its side).
ALTER TABLE fake_pay_orders ADD COLUMN refund_no TEXT;
ALTER TABLE fake_pay_orders ADD COLUMN refund_id TEXT;
ALTER TABLE fake_pay_orders ADD COLUMN refund_amt BIGINT;
ALTER TABLE fake_pay_orders ADD COLUMN refunded_at BIGINT;
CREATE INDEX fake_pay_orders_refunded ON fake_pay_orders (refunded_at);

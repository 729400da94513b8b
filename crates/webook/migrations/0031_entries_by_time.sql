-- Reconciliation reads a day's postings of a kind: every posting must have the payment (or the
-- refund) it stands for.
CREATE INDEX account_entries_biz_time ON account_entries (biz, ctime, biz_id);

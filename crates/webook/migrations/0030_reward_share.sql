-- The platform's share (basis points) when the reward was made: its posting is split, and
-- checked by reconciliation, by it. NULL for rewards made before: the share in force applies.
ALTER TABLE rewards ADD COLUMN share_bps BIGINT;

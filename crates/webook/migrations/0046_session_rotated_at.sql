-- When a session's refresh generation last moved (ms since 1970; 0: before this column, or
-- never). A refresh token of the generation just left may be presented again within
-- `refresh_retry_window` of it — its first answer was lost — without counting as a reuse.
ALTER TABLE sessions ADD COLUMN rotated_at BIGINT NOT NULL DEFAULT 0;

-- Notifications of moderation actions (kind `moderation`, one row per target: group_key
-- `{article|comment|user}:{id}`, kept at the target's latest action): what was done (action:
-- hide, restore, approve, delete, suspend, lift), the moderator's reason, and a suspension's
-- end (until_ms; 0: for good or not a suspension). Empty and 0 for every other kind.
ALTER TABLE notifications ADD COLUMN action TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE notifications ADD COLUMN until_ms BIGINT NOT NULL DEFAULT 0;

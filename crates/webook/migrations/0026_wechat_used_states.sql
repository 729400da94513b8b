-- The WeChat login states already used by a callback (API.md → Users → Other ways to sign in):
-- a state signs one person in once. A callback inserts its state here before it calls WeChat;
-- the insert that finds the row taken is a replay and is refused. Shared by every instance
-- through the database. expires_at (ms): when the state's signed cookie has expired for sure
-- (its issue plus wechat_state_ttl at most); rows past it are deleted by later callbacks.
CREATE TABLE wechat_used_states (
    state      TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
CREATE INDEX wechat_used_states_expires_at ON wechat_used_states (expires_at);

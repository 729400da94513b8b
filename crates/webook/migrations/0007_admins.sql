-- Users with admin rights granted by an operator (`webook admin grant`), beside the ids listed in
-- config `admins`. Rights follow the user id, never an email: an unregistered email could be
-- claimed by whoever signs up with it first.
CREATE TABLE admins (
    user_id    BIGINT PRIMARY KEY REFERENCES users (id),
    granted_at BIGINT NOT NULL
);

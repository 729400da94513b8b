//! The platform crate's integration tests, in one test binary: the pieces every feature stands on,
//! tested on their own, on the platform's tables alone (`platform::schema`) — the versioned cache
//! (`cache`), exactly-once application of events (`dedup`), the transactional outbox and its
//! relay (`outbox`), consumer groups' delivery, parking and replay on both backends
//! (`event_groups`), the Redis event stream and its consumer groups (`events`), following topics
//! from one's own positions (`follow`), and the crate's structure (`structure`: no import circle
//! between its modules).
//!
//! Run one module with a name filter, with the services up:
//! `scripts/with-services.sh cargo test -p platform --test it events::`.

mod cache;
mod dedup;
mod event_groups;
mod events;
mod follow;
mod outbox;
mod structure;

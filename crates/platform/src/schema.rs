//! The platform's own tables, which an application migrates with its features' (in version
//! order, [`crate::db::Db::migrate`]): `meta`, `idempotency_keys`, the event outbox, consumer
//! groups' progress and parked events, and applied-event ids. Each migration is defined beside
//! the code that owns its table; this is the one list of them.

use crate::{
    db::{
        Migration, EVENT_GROUPS_MIGRATION, META_MIGRATION, OUTBOX_MIGRATION, OUTBOX_TRACE_MIGRATION,
    },
    events::dedup::CONSUMED_EVENTS_MIGRATION,
    idempotency::IDEMPOTENCY_MIGRATION,
};

/// Every platform migration, in version order.
pub const MIGRATIONS: [Migration; 6] = [
    META_MIGRATION,
    IDEMPOTENCY_MIGRATION,
    OUTBOX_MIGRATION,
    EVENT_GROUPS_MIGRATION,
    CONSUMED_EVENTS_MIGRATION,
    OUTBOX_TRACE_MIGRATION,
];

//! Users' profiles: reads and edits (nickname, birthday, about me), each edit announced through
//! the outbox (`user_profile_changed`) for the features that show or index profiles; and the
//! account rules (email, password strength, display name) the auth feature signs people in with.
//!
//! Data flow: [`http`] parses requests of signed-in callers (the auth feature's extractors) and
//! calls [`UserService`], which validates edits ([`model`]) and reads and writes `users`
//! ([`store`]: one transaction for an edit and its event).

pub mod http;
pub mod model;
mod seed;
pub mod service;
pub mod store;

pub use model::{
    check_password_strength, display_name, normalize_email, Person, ProfileEvent,
    TOPIC_PROFILE_CHANGED,
};
pub use seed::{insert_seeded_users, next_user_id, SeededUser};
pub use service::UserService;
pub use store::{InsertError, UserStore, WechatIdentity};

use async_trait::async_trait;
use platform::{
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

/// The users feature: profiles. Installed after auth, whose extractors its handlers use; it
/// provides [`UserService`] to the features installed after it.
pub struct Users;

#[async_trait]
impl Feature for Users {
    fn name(&self) -> &'static str {
        "users"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<UserService>()] }
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(2, "users", include_str!("../../migrations/0002_users.sql")),
            Migration::per_engine(
                15,
                "sign-in identities",
                include_str!("../../migrations/0015_sign_in_identities.sql"),
                include_str!("../../migrations/0015_sign_in_identities.sqlite.sql"),
            ),
            Migration::new(
                46,
                "session rotation time",
                include_str!("../../migrations/0046_session_rotated_at.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        platform::openapi::course_routes(<http::ProfileApi as utoipa::OpenApi>::openapi())
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let users = UserService::new(UserStore::new(platform.db.clone()), platform.outbox.clone());
        registry.routes(http::router(http::UserRoutes {
            users: users.clone(),
        }));
        registry.provide(users);
        Ok(())
    }
}

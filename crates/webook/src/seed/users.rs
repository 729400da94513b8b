//! Phase 1 of `webook seed` ([`super`]): the accounts, in batches of [`USERS_PER_BATCH`], each
//! written in a transaction of its own by the user feature ([`crate::user::SeededUser`]).
//! Users registered over the [`REGISTRATION_DAYS`](super::REGISTRATION_DAYS) before the article
//! window, in id order; names and profiles are Chinese or English ([`text`]).

use super::{
    generator::{Batch, Generator, Sink, WriterGone},
    random::{Rng, Stream},
    text,
};
use crate::user::SeededUser;

/// Users per batch, and so per transaction.
const USERS_PER_BATCH: usize = 5_000;

impl Generator {
    /// Phase 1: every user.
    pub(super) fn users(&self, send: Sink<'_>) -> Result<(), WriterGone> {
        let plan = &self.plan;
        send(Batch::Phase {
            name: "users",
            rows: plan.users,
        })?;
        for start in (0..plan.users).step_by(USERS_PER_BATCH) {
            let end = (start + USERS_PER_BATCH as u64).min(plan.users);
            send(Batch::Users((start..end).map(|u| self.user(u)).collect()))?;
        }
        Ok(())
    }

    /// User `index`: registered over the 90 days before the article window.
    fn user(&self, index: u64) -> SeededUser {
        let mut rng = Rng::new(self.plan.seed, Stream::User, index);
        let ctime = self.registration(index, &mut rng);
        let id = self.first_user_id + index as i64;
        SeededUser {
            id,
            email: format!("seed{id}@example.com"),
            nickname: text::nickname(&mut rng),
            about_me: text::about_me(&mut rng),
            ctime,
        }
    }
}

//! The rules of profiles: reads and validated edits, each edit announced through the outbox.
//! No HTTP, no SQL text.

use crate::user::{
    model::{Profile, ProfileEdit, TOPIC_PROFILE_CHANGED},
    store::UserStore,
};
use platform::{
    db::now_millis,
    error::{AppError, Msg},
    events::outbox::Outbox,
};

const NO_SUCH_USER: AppError = AppError::NotFound(Msg::new("no such user", "用户不存在"));

/// Profiles; cheap to clone.
#[derive(Debug, Clone)]
pub struct UserService {
    store: UserStore,
    /// Profile edits record their event in it; woken after each.
    outbox: Outbox,
}

impl UserService {
    /// Profiles in `store`, edits announced through `outbox`.
    pub fn new(store: UserStore, outbox: Outbox) -> Self {
        Self { store, outbox }
    }

    /// The profile of `uid`.
    pub async fn profile(&self, uid: i64) -> Result<Profile, AppError> {
        self.store
            .find_by_id(uid)
            .await?
            .map(Profile::from)
            .ok_or(NO_SUCH_USER)
    }

    /// Applies a validated profile edit.
    pub async fn edit_profile(&self, uid: i64, edit: &ProfileEdit) -> Result<(), AppError> {
        let announce = self.outbox.wants(TOPIC_PROFILE_CHANGED);
        if self
            .store
            .update_profile(uid, edit, now_millis(), announce)
            .await?
        {
            self.outbox.committed();
            Ok(())
        } else {
            Err(NO_SUCH_USER)
        }
    }
}

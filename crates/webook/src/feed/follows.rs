//! The rules of following: nobody follows themselves, only existing users are followed, a
//! repeat changes nothing, and counts and lists are exact. Every change commits with its event
//! in the outbox ([`FollowStore::set_follow`]), then wakes the relay; the feed turns the event
//! into the followee's `follow` item.

use platform::{
    db::now_millis,
    detached::to_completion,
    error::{positive_id, AppError, Msg},
    events::outbox::Outbox,
};

use crate::feed::{
    follow_store::{FollowError, FollowStore, Side},
    model::{Cursor, FollowCounts, FollowUser, Page, TOPIC_FOLLOW_CHANGED},
};

/// Follow relations; cheap to clone.
#[derive(Debug, Clone)]
pub struct FollowService {
    store: FollowStore,
    outbox: Outbox,
}

impl FollowService {
    /// The service over `store`, recording its events in `outbox`.
    pub fn new(store: FollowStore, outbox: Outbox) -> Self {
        Self { store, outbox }
    }

    /// `follower` follows (`on`) or stops following `followee`; idempotent. 4 for oneself,
    /// 404001 for a user that does not exist. Completes even if the caller goes away.
    pub async fn set_follow(&self, follower: i64, followee: i64, on: bool) -> Result<(), AppError> {
        positive_id("followee", followee)?;
        if follower == followee {
            return Err(AppError::InvalidInput(Msg::field(
                "followee",
                "cannot be yourself",
                "不能关注自己",
            )));
        }
        let service = self.clone();
        to_completion(async move {
            let announce = service.outbox.wants(TOPIC_FOLLOW_CHANGED);
            match service
                .store
                .set_follow(follower, followee, on, now_millis(), announce)
                .await
            {
                Ok(changed) => {
                    if changed && announce {
                        service.outbox.committed();
                    }
                    Ok(())
                }
                Err(FollowError::NoSuchUser) => {
                    Err(AppError::NotFound(Msg::new("no such user", "用户不存在")))
                }
                Err(FollowError::Db(err)) => Err(err.into()),
            }
        })
        .await
    }

    /// The exact follower and followee counts of `uid`.
    pub async fn counts(&self, uid: i64) -> Result<FollowCounts, AppError> {
        Ok(self.store.counts(uid).await?)
    }

    /// Whether `follower` follows `followee`.
    pub async fn is_following(&self, follower: i64, followee: i64) -> Result<bool, AppError> {
        Ok(self.store.is_following(follower, followee).await?)
    }

    /// A page of `uid`'s followees or followers, newest follow first, each with whether
    /// `caller` follows them.
    pub async fn list(
        &self,
        caller: i64,
        uid: i64,
        side: Side,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<FollowUser>, AppError> {
        let after = cursor.map(Cursor::decode).transpose()?;
        let (items, next) = self.store.list(caller, uid, side, after, limit).await?;
        Ok(Page {
            items,
            next: next.map(Cursor::encode),
        })
    }
}

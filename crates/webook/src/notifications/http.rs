//! `/notifications*` (API.md → Notifications): thin handlers over [`NotificationService`]. Every
//! route needs a signed-in caller and concerns only the caller's own inbox; the writes (`POST
//! /notifications/read`, `PUT /notifications/preferences`) go through the write rate limit.
//! Input is checked here (code 4 naming the field) before the service is called.
//! `GET /notifications/stream` is Server-Sent Events: an `unread` event with `{"count": n}` at
//! once and whenever the count changes ([`super::live`]), a keep-alive comment every 15 s, and
//! an end after [`STREAM_LIFETIME`] (clients reconnect; `EventSource` does by itself) or as
//! soon as the process starts to drain, so a stopping server never waits for its streams.

use std::{convert::Infallible, sync::Arc, time::Duration};

use axum::{
    extract::State,
    http::StatusCode,
    response::{
        sse::{Event, KeepAlive, Sse},
        IntoResponse, Response,
    },
    routing::{get, post},
    Router,
};
use serde::Deserialize;
use tokio::sync::broadcast::{error::RecvError, Receiver};
use utoipa::{IntoParams, ToSchema};

use crate::notifications::{
    live::EVERYONE,
    model::{NotificationView, Preferences, Unread},
    NotificationService,
};
use platform::{
    caller::{AuthUser, Writer},
    error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::{Envelope, Null},
    page::{page_limit, Page},
};

/// What the notification handlers reach.
pub struct NotificationRoutes {
    /// Notifications.
    pub notifications: NotificationService,
    /// Cancelled when the process starts to drain: open streams end at once.
    pub draining: tokio_util::sync::CancellationToken,
    /// Who gets the stream (`notifications_stream`, a grey-release switch).
    pub stream_switch: platform::live::Switch,
}

/// The routes.
pub fn router(routes: NotificationRoutes) -> Router {
    Router::new()
        .route("/notifications", get(list))
        .route("/notifications/unread", get(unread))
        .route("/notifications/stream", get(stream))
        .route("/notifications/read", post(read))
        .route(
            "/notifications/preferences",
            get(preferences).put(set_preferences),
        )
        .with_state(Arc::new(routes))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// The caller's notifications, most recently changed first.
#[utoipa::path(
    get,
    path = "/notifications",
    security(("access_token" = [])),
    params(PageQuery),
    responses((status = 200, description = "A page. Code 4: a `limit` out of 1–100 or a \
               `cursor` this list did not give.", body = Envelope<Page<NotificationView>>))
)]
async fn list(
    State(state): State<Arc<NotificationRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Page<NotificationView>> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .notifications
            .page(user.uid, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// How many of the caller's notifications are unread (an index-only count).
#[utoipa::path(
    get,
    path = "/notifications/unread",
    security(("access_token" = [])),
    responses((status = 200, description = "The count.", body = Envelope<Unread>))
)]
async fn unread(State(state): State<Arc<NotificationRoutes>>, user: AuthUser) -> ApiResult<Unread> {
    Ok(Reply(state.notifications.unread(user.uid).await?))
}

/// Longest a stream stays open before it ends (the client reconnects).
pub const STREAM_LIFETIME: Duration = Duration::from_secs(600);
/// How often an idle stream sends a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The caller's unread count, live: Server-Sent Events.
#[utoipa::path(
    get,
    path = "/notifications/stream",
    security(("access_token" = [])),
    responses((status = 200, description = "`text/event-stream`: an `unread` event whose data \
               is `{\"count\": n}` at once and whenever the count changes, on whichever \
               instance the change was made; a keep-alive comment every 15 s; the stream ends \
               after 10 minutes (reconnect).", content_type = "text/event-stream", body = String),
               (status = 204, description = "The stream is switched off for this user (setting \
               `notifications_stream`): poll `GET /notifications/unread` instead."))
)]
async fn stream(State(state): State<Arc<NotificationRoutes>>, user: AuthUser) -> Response {
    if !state.stream_switch.on_for(Some(user.uid)) {
        return StatusCode::NO_CONTENT.into_response();
    }
    let notifications = state.notifications.clone();
    // Listening before the first read: no change can fall between the two.
    let changes = notifications.live().subscribe();
    let watch = Watch {
        notifications,
        changes,
        uid: user.uid,
        last: None,
        first: true,
        deadline: tokio::time::Instant::now() + STREAM_LIFETIME,
        draining: state.draining.clone(),
    };
    let events = futures_util::stream::unfold(watch, |mut watch| async move {
        let count = watch.next_count().await?;
        let event = Event::default()
            .event("unread")
            .data(format!("{{\"count\":{count}}}"));
        Some((Ok::<_, Infallible>(event), watch))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// One stream's view of its user's count.
struct Watch {
    notifications: NotificationService,
    changes: Receiver<i64>,
    uid: i64,
    /// The count sent last.
    last: Option<i64>,
    first: bool,
    deadline: tokio::time::Instant,
    /// The process is stopping: the stream ends (the client reconnects to another instance).
    draining: tokio_util::sync::CancellationToken,
}

impl Watch {
    /// The next count to send (a different one from the last); `None` when the stream ends.
    async fn next_count(&mut self) -> Option<i64> {
        loop {
            if !self.first {
                let draining = self.draining.clone();
                tokio::select! {
                    woken = tokio::time::timeout_at(self.deadline, self.woken()) => woken.ok()??,
                    () = draining.cancelled() => return None,
                }
            }
            self.first = false;
            match self.notifications.unread(self.uid).await {
                Ok(Unread { count }) if self.last != Some(count) => {
                    self.last = Some(count);
                    return Some(count);
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(%err, uid = self.uid, "cannot read an unread count"),
            }
        }
    }

    /// Until this user's count may have changed; `None` if no change can come any more.
    async fn woken(&mut self) -> Option<()> {
        loop {
            match self.changes.recv().await {
                Ok(uid) if uid == self.uid || uid == EVERYONE => return Some(()),
                Ok(_) => {}
                // Fell behind: whatever it missed, one read covers it.
                Err(RecvError::Lagged(_)) => return Some(()),
                Err(RecvError::Closed) => return None,
            }
        }
    }
}

/// Which notifications to mark read: one (`id`) or all (`all: true`), not both.
#[derive(Deserialize, ToSchema)]
#[schema(as = ReadNotifications)]
struct ReadRequest {
    /// One of the caller's notifications.
    id: Option<i64>,
    /// `true`: every notification of the caller.
    all: Option<bool>,
}

/// What a [`ReadRequest`] asks for.
#[derive(Debug, PartialEq, Eq)]
enum ToRead {
    One(i64),
    All,
}

impl ReadRequest {
    /// Exactly one of a positive `id` or `all: true`; code 4 otherwise.
    fn check(&self) -> Result<ToRead, AppError> {
        match (self.id, self.all) {
            (Some(id), None | Some(false)) => Ok(ToRead::One(positive_id("id", id)?)),
            (None, Some(true)) => Ok(ToRead::All),
            (Some(_), Some(true)) => Err(AppError::InvalidInput(Msg::field(
                "id",
                "give either id or all, not both",
                "id 与 all 只能给出一个",
            ))),
            (None, None | Some(false)) => Err(AppError::InvalidInput(Msg::field(
                "id",
                "give id, or all: true",
                "须给出 id 或 all: true",
            ))),
        }
    }
}

/// Marks one notification of the caller's, or all of them, read.
#[utoipa::path(
    post,
    path = "/notifications/read",
    security(("access_token" = [])),
    request_body = ReadRequest,
    responses((status = 200, description = "Marked. Code 4: neither or both of `id` and `all`, \
               or a non-positive `id`; 404001: the caller has no such notification.",
               body = Envelope<Null>))
)]
async fn read(
    State(state): State<Arc<NotificationRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<ReadRequest>,
) -> ApiResult<()> {
    match request.check()? {
        ToRead::One(id) => state.notifications.mark_read(user.uid, id).await?,
        ToRead::All => state.notifications.mark_all_read(user.uid).await?,
    }
    Ok(Reply(()))
}

/// The kinds the caller turned off.
#[utoipa::path(
    get,
    path = "/notifications/preferences",
    security(("access_token" = [])),
    responses((status = 200, description = "The muted kinds.", body = Envelope<Preferences>))
)]
async fn preferences(
    State(state): State<Arc<NotificationRoutes>>,
    user: AuthUser,
) -> ApiResult<Preferences> {
    Ok(Reply(state.notifications.preferences(user.uid).await?))
}

/// Replaces the kinds the caller turned off; nothing new of those kinds is written for them
/// (what exists stays).
#[utoipa::path(
    put,
    path = "/notifications/preferences",
    security(("access_token" = [])),
    request_body = Preferences,
    responses((status = 200, description = "The muted kinds as stored. Code 4: an unknown \
               kind.", body = Envelope<Preferences>))
)]
async fn set_preferences(
    State(state): State<Arc<NotificationRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<Preferences>,
) -> ApiResult<Preferences> {
    Ok(Reply(
        state
            .notifications
            .set_preferences(user.uid, &request.muted)
            .await?,
    ))
}

/// The notification routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(list, unread, stream, read, preferences, set_preferences))]
pub struct NotificationsApi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_request_names_one_notification_or_all() {
        let request = |id, all| ReadRequest { id, all };
        assert_eq!(request(Some(3), None).check().unwrap(), ToRead::One(3));
        assert_eq!(
            request(Some(3), Some(false)).check().unwrap(),
            ToRead::One(3)
        );
        assert_eq!(request(None, Some(true)).check().unwrap(), ToRead::All);
        for bad in [
            request(None, None),
            request(None, Some(false)),
            request(Some(3), Some(true)),
            request(Some(0), None),
            request(Some(-1), None),
        ] {
            let err = bad.check().unwrap_err();
            assert_eq!(err.code(), 4);
            assert!(err.to_string().contains("id"), "{err}");
        }
    }
}

//! The rules of moderation: who may report what and how often, what each action does to its
//! target (through the target's own feature, so hiding follows the same events and versioned
//! caches as a withdrawal or a deletion), the audit log, and the write gate of suspended and new
//! accounts. No HTTP, no SQL text.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use platform::{
    caller::GatesWrites,
    db::now_millis,
    detached::to_completion,
    error::{AppError, Msg},
    events::outbox::Outbox,
    live::{LiveConfig, LiveRateLimiter},
    rate_limit::RateLimiter,
    redis::Redis,
};

use crate::{
    article::{ArticleService, Moderation},
    comment::{CommentModeration, CommentService},
    moderation::{
        model::{
            Acted, Action, HeldArticle, HeldComment, Kind, LogEntry, Notice, Order, QueueItem,
            Reason, ReportView, Suspension, TOPIC_MODERATION_ACTED,
        },
        settings::ModerationSettings,
        store::{ModerationStore, NotFiled, WriterState},
    },
};

/// Longest note of a report, in characters.
pub const MAX_NOTE_CHARS: usize = 500;
/// Longest reason of an action, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// Counter: reports filed, by `kind` and `reason`.
pub const MODERATION_REPORTS_TOTAL: &str = "moderation_reports_total";
/// Counter: admins' actions, by `action` and whether they `changed` anything.
pub const MODERATION_ACTIONS_TOTAL: &str = "moderation_actions_total";
/// Counter: writes refused by the gate, by `why` (suspended, new_account).
pub const MODERATION_WRITES_REFUSED_TOTAL: &str = "moderation_writes_refused_total";
/// Counter: the write gate's reads of accounts, each for one batch of writes.
pub const MODERATION_GATE_READS_TOTAL: &str = "moderation_gate_reads_total";
/// Gauge: writes waiting for the write gate's next read.
pub const MODERATION_GATE_WAITING: &str = "moderation_gate_waiting";

/// The moderation metrics.
pub const METRICS: platform::telemetry::MetricsSpec = platform::telemetry::MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        MODERATION_REPORTS_TOTAL,
        "Reports filed, by kind and reason"
    );
    metrics::describe_counter!(
        MODERATION_ACTIONS_TOTAL,
        "Moderators' actions, by action and whether they changed anything"
    );
    metrics::describe_counter!(
        MODERATION_WRITES_REFUSED_TOTAL,
        "Writes refused by moderation (why=suspended, new_account)"
    );
    metrics::describe_counter!(
        MODERATION_GATE_READS_TOTAL,
        "Reads of accounts by the write gate, each for one batch of writes"
    );
    metrics::describe_gauge!(
        MODERATION_GATE_WAITING,
        "Writes waiting for the write gate's next read"
    );
}

const NO_TARGET: AppError =
    AppError::NotFound(Msg::new("no such object to report", "举报对象不存在"));
const OWN: AppError = AppError::InvalidInput(Msg::new(
    "id: you cannot report your own content or account",
    "id：不能举报自己的内容或账号",
));
const DUPLICATE: AppError = AppError::Conflict(Msg::new(
    "you have already reported this; a moderator will look at it",
    "你已举报过，管理员会尽快处理",
));
const NO_SUCH_TARGET: AppError = AppError::NotFound(Msg::new("no such object", "对象不存在"));

/// Moderation; cheap to clone.
#[derive(Clone)]
pub struct ModerationService {
    store: ModerationStore,
    articles: ArticleService,
    comments: CommentService,
    reports: LiveRateLimiter,
    new_accounts: Option<(RateLimiter, i64)>,
    outbox: Outbox,
}

impl std::fmt::Debug for ModerationService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModerationService")
    }
}

impl ModerationService {
    /// The service; with `redis`, the report and new-account limits hold across instances.
    /// The new-account limit is stricter than the general write limit: off while that is off
    /// (`writes_limited` false, as load tests run), or while its period is 0.
    pub fn new(
        store: ModerationStore,
        articles: ArticleService,
        comments: CommentService,
        outbox: Outbox,
        settings: &ModerationSettings,
        writes_limited: bool,
        (live, redis): (&LiveConfig, Option<(&Redis, &str)>),
    ) -> anyhow::Result<Self> {
        let reports = LiveRateLimiter::new("moderation_report", live, redis, |config| {
            let settings = config.settings::<ModerationSettings>()?;
            Ok((
                settings.moderation_report_limit,
                settings.moderation_report_window,
            ))
        })?;
        let new_accounts = if settings.moderation_new_account_period.is_zero() || !writes_limited {
            None
        } else {
            Some((
                RateLimiter::of_mode(
                    "new_account_write",
                    redis,
                    settings.moderation_new_account_write_limit,
                    settings.moderation_new_account_window,
                )?,
                i64::try_from(settings.moderation_new_account_period.as_millis())
                    .unwrap_or(i64::MAX),
            ))
        };
        Ok(Self {
            store,
            articles,
            comments,
            reports,
            new_accounts,
            outbox,
        })
    }

    /// Files `reporter`'s report; returns its id. 404001 for a target readers cannot see,
    /// 409001 while the reporter's earlier report of it is open, code 4 for their own.
    pub async fn report(
        &self,
        reporter: i64,
        kind: Kind,
        id: i64,
        reason: Reason,
        note: &str,
    ) -> Result<i64, AppError> {
        let note = note.trim();
        if note.chars().count() > MAX_NOTE_CHARS {
            return Err(AppError::InvalidInput(Msg::field(
                "note",
                format!("at most {MAX_NOTE_CHARS} characters"),
                format!("最多 {MAX_NOTE_CHARS} 个字符"),
            )));
        }
        if reason == Reason::Other && note.is_empty() {
            return Err(AppError::InvalidInput(Msg::new(
                "note: say what is wrong when the reason is other",
                "note：原因为其他时请说明情况",
            )));
        }
        self.reports.check(&reporter.to_string()).await?;
        let filed = self
            .store
            .file(reporter, kind, id, reason.as_str(), note, now_millis())
            .await?;
        match filed {
            Ok(report) => {
                metrics::counter!(MODERATION_REPORTS_TOTAL, "kind" => kind.as_str(), "reason" => reason.as_str())
                    .increment(1);
                Ok(report)
            }
            Err(NotFiled::NoTarget) => Err(NO_TARGET),
            Err(NotFiled::Own) => Err(OWN),
            Err(NotFiled::Duplicate) => Err(DUPLICATE),
        }
    }

    /// The review queue ([`ModerationStore::queue`]).
    pub async fn queue(
        &self,
        by_count: bool,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<QueueItem>, AppError> {
        Ok(self.store.queue(by_count, offset, limit).await?)
    }

    /// Articles held for review ([`ModerationStore::held`]).
    pub async fn held(&self, offset: i64, limit: i64) -> Result<Vec<HeldArticle>, AppError> {
        Ok(self.store.held(offset, limit).await?)
    }

    /// Comments held for review ([`ModerationStore::held_comments`]).
    pub async fn held_comments(
        &self,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<HeldComment>, AppError> {
        Ok(self.store.held_comments(offset, limit).await?)
    }

    /// Every report of one target, newest first.
    pub async fn reports(&self, kind: Kind, id: i64) -> Result<Vec<ReportView>, AppError> {
        Ok(self.store.reports(kind, id, false, 500).await?)
    }

    /// The audit log ([`ModerationStore::log`]).
    pub async fn log(
        &self,
        target: Option<(Kind, i64)>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<LogEntry>, AppError> {
        Ok(self.store.log(target, before, limit).await?)
    }

    /// Admin `admin`'s order on a target: the change (through the target's feature), the
    /// target's open reports closed and the audit entry. Repeating an action changes nothing
    /// more (it is logged as `unchanged`). Runs to completion even if the caller goes away.
    pub async fn act(&self, admin: i64, mut order: Order) -> Result<Acted, AppError> {
        if !order.action.applies_to(order.kind) {
            let (action, kind) = (order.action.as_str(), order.kind.as_str());
            return Err(AppError::InvalidInput(Msg::field(
                "action",
                format!("{action} does not apply to a {kind}"),
                format!("{action} 不适用于 {kind}"),
            )));
        }
        order.reason = order.reason.trim().to_owned();
        if order.reason.is_empty() || order.reason.chars().count() > MAX_REASON_CHARS {
            return Err(AppError::InvalidInput(Msg::field(
                "reason",
                format!("required, at most {MAX_REASON_CHARS} characters"),
                format!("必填，最多 {MAX_REASON_CHARS} 个字符"),
            )));
        }
        let now = now_millis();
        if order.until.is_some_and(|until| until <= now) {
            return Err(AppError::InvalidInput(Msg::new(
                "until: must be in the future",
                "until：须晚于现在",
            )));
        }
        let service = self.clone();
        to_completion(async move { service.apply(admin, &order, now).await }).await
    }

    async fn apply(&self, admin: i64, order: &Order, now: i64) -> Result<Acted, AppError> {
        let Order {
            action,
            kind,
            id,
            ref reason,
            until,
            hide_content,
        } = *order;
        let announce = self.outbox.wants(TOPIC_MODERATION_ACTED);
        let (changed, outcome, notice) = match (action, kind) {
            (Action::Dismiss, _) => (false, "dismissed".to_owned(), None),
            (Action::Hide | Action::Restore | Action::Delete, Kind::Article) => {
                let moderation = match action {
                    Action::Hide => Moderation::Hide,
                    Action::Restore => Moderation::Restore,
                    _ => Moderation::Remove,
                };
                let moderated = self
                    .articles
                    .moderate(id, moderation, reason)
                    .await?
                    .ok_or(NO_SUCH_TARGET)?;
                let notice = Notice {
                    recipient: moderated.author,
                    action: told(action, moderated.was_held),
                    article: id,
                    comment: 0,
                    excerpt: String::new(),
                    until: None,
                };
                (
                    moderated.changed,
                    outcome_of(action, moderated.changed),
                    Some(notice),
                )
            }
            (Action::Hide | Action::Restore | Action::Delete, Kind::Comment) => {
                let brief = self.store.comment_brief(id).await?.ok_or(NO_SUCH_TARGET)?;
                let (changed, outcome) = self.moderate_comment(action, id).await?;
                let notice = Notice {
                    recipient: brief.author,
                    action: told(action, brief.held),
                    article: brief.article,
                    comment: id,
                    excerpt: brief.content,
                    until: None,
                };
                (changed, outcome, Some(notice))
            }
            (Action::Suspend, Kind::User) => {
                let (changed, closed, log) = self
                    .store
                    .suspend(admin, id, until.unwrap_or(i64::MAX), reason, now, announce)
                    .await?
                    .ok_or(NO_SUCH_TARGET)?;
                self.outbox.committed();
                if hide_content {
                    self.hide_content_of(admin, id, reason, now).await?;
                }
                count_action(action, changed);
                let outcome = if hide_content {
                    "suspended, content hidden"
                } else {
                    "suspended"
                };
                return Ok(Acted {
                    outcome: outcome.to_owned(),
                    changed,
                    closed,
                    log,
                });
            }
            (Action::Lift, Kind::User) => {
                if !self.store.exists(Kind::User, id).await? {
                    return Err(NO_SUCH_TARGET);
                }
                let (changed, log) = self.store.lift(admin, id, reason, now, announce).await?;
                self.outbox.committed();
                count_action(action, changed);
                return Ok(Acted {
                    outcome: if changed { "lifted" } else { "unchanged" }.to_owned(),
                    changed,
                    closed: 0,
                    log,
                });
            }
            _ => return Err(NO_SUCH_TARGET),
        };
        // Restoring closes nothing (no state matches ''); any other action settles the
        // target's open reports.
        let state = match action {
            Action::Dismiss => "dismissed",
            Action::Restore => "",
            _ => "actioned",
        };
        let (closed, log) = self
            .store
            .close_and_log(
                admin,
                action.as_str(),
                kind,
                id,
                state,
                reason,
                &outcome,
                now,
                notice.filter(|_| announce),
            )
            .await?;
        self.outbox.committed();
        count_action(action, changed);
        Ok(Acted {
            outcome,
            changed,
            closed,
            log,
        })
    }

    /// Hides, restores or deletes comment `id`: (changed, the log's outcome).
    async fn moderate_comment(&self, action: Action, id: i64) -> Result<(bool, String), AppError> {
        if action == Action::Delete {
            return match self.comments.delete_as_moderator(id).await? {
                Some(_) => Ok((true, "deleted".to_owned())),
                None if self.store.exists(Kind::Comment, id).await? => {
                    Ok((false, "unchanged (already deleted)".to_owned()))
                }
                None => Err(NO_SUCH_TARGET),
            };
        }
        let moderation = if action == Action::Hide {
            CommentModeration::Hide
        } else {
            CommentModeration::Restore
        };
        let moderated = self
            .comments
            .moderate(id, moderation)
            .await?
            .ok_or(NO_SUCH_TARGET)?;
        Ok((moderated.changed, outcome_of(action, moderated.changed)))
    }

    /// Hides every published article and shown comment of `uid` (a suspension's option), each
    /// logged and its open reports closed as its own hide would.
    async fn hide_content_of(
        &self,
        admin: i64,
        uid: i64,
        reason: &str,
        now: i64,
    ) -> Result<(), AppError> {
        for article in self.store.published_by(uid).await? {
            let changed = self
                .articles
                .moderate(article, Moderation::Hide, reason)
                .await?
                .is_some_and(|moderated| moderated.changed);
            self.store
                .close_and_log(
                    admin,
                    "hide",
                    Kind::Article,
                    article,
                    "actioned",
                    reason,
                    &outcome_of(Action::Hide, changed),
                    now,
                    None,
                )
                .await?;
        }
        for comment in self.store.comments_by(uid).await? {
            let changed = self
                .comments
                .moderate(comment, CommentModeration::Hide)
                .await?
                .is_some_and(|moderated| moderated.changed);
            self.store
                .close_and_log(
                    admin,
                    "hide",
                    Kind::Comment,
                    comment,
                    "actioned",
                    reason,
                    &outcome_of(Action::Hide, changed),
                    now,
                    None,
                )
                .await?;
        }
        Ok(())
    }

    /// The caller's own suspension, if any (so a suspended reader's console can say so).
    pub async fn suspension(&self, uid: i64) -> Result<Option<Suspension>, AppError> {
        let (_, suspension) = self.store.writer_state(uid).await?;
        Ok(suspension
            .filter(|(until, _)| *until > now_millis())
            .map(|(until, reason)| Suspension {
                until: (until != i64::MAX).then_some(until),
                reason,
            }))
    }
}

fn count_action(action: Action, changed: bool) {
    metrics::counter!(MODERATION_ACTIONS_TOTAL, "action" => action.as_str(), "changed" => changed.to_string())
        .increment(1);
}

/// The action as the person it concerns is told it: a restore of held content is an approval.
fn told(action: Action, was_held: bool) -> &'static str {
    if action == Action::Restore && was_held {
        "approve"
    } else {
        action.as_str()
    }
}

/// The log's outcome of an action that changed something or not.
fn outcome_of(action: Action, changed: bool) -> String {
    let done = match action {
        Action::Hide => "hidden",
        Action::Restore => "restored",
        Action::Delete => "deleted",
        Action::Dismiss => "dismissed",
        Action::Suspend => "suspended",
        Action::Lift => "lifted",
    };
    if changed {
        done.to_owned()
    } else {
        format!("unchanged (already {done}, or not possible)")
    }
}

/// Accounts the write gate reads in one query at most.
const GATE_BATCH: usize = 512;
/// Writes waiting for the gate's read before callers wait to enqueue.
const GATE_QUEUE: usize = 4096;

/// A write's question to the gate's reader: `None` back means read it yourself (the batch's
/// read failed).
struct GateAsk {
    uid: i64,
    reply: oneshot::Sender<Option<WriterState>>,
}

/// The write gate: a suspended account's writes are refused (403003, saying until when and
/// why); a new account's count against its stricter limit (429001). Accounts are read through
/// a [`GateReader`].
pub struct WriteGate {
    service: Arc<ModerationService>,
    reader: GateReader,
}

impl WriteGate {
    /// The gate of `service`, with its [`GateReader`].
    pub fn new(service: Arc<ModerationService>) -> Self {
        let reader = GateReader::new(service.store.clone());
        Self { service, reader }
    }
}

/// Reads the accounts of writes for the write gate. Every write's account is read after the
/// write arrived — a suspension committed before applies to the next write, on any instance —
/// but not with a query per write: a reader task takes every write waiting (up to
/// [`GATE_BATCH`]), reads their accounts in one query and answers each; writes arriving
/// meanwhile wait for the next read, as likes wait for the like writer's next commit. Alone, a
/// write waits for its own query only. When a batch's read fails, each of its writes reads its
/// account itself and so gets its own error (a database that is down is a 503). The task ends
/// when the last clone is dropped. Cheap to clone.
#[derive(Clone)]
pub struct GateReader {
    store: ModerationStore,
    asks: mpsc::Sender<GateAsk>,
}

impl GateReader {
    /// The reader of `store`'s accounts; spawns its task.
    pub fn new(store: ModerationStore) -> Self {
        let (asks, mut queue) = mpsc::channel::<GateAsk>(GATE_QUEUE);
        let reads = store.clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(GATE_BATCH);
            while queue.recv_many(&mut batch, GATE_BATCH).await > 0 {
                metrics::gauge!(MODERATION_GATE_WAITING).set(queue.len() as f64);
                metrics::counter!(MODERATION_GATE_READS_TOTAL).increment(1);
                let mut uids: Vec<i64> = batch.iter().map(|ask| ask.uid).collect();
                uids.sort_unstable();
                uids.dedup();
                let states = reads.writer_states(&uids).await.map_err(|err| {
                    tracing::warn!(size = uids.len(), %err, "the write gate's read failed; each write reads its own");
                });
                for ask in batch.drain(..) {
                    let state = states
                        .as_ref()
                        .ok()
                        .map(|states| states.get(&ask.uid).cloned().unwrap_or((None, None)));
                    // A write that went away does not wait for its answer.
                    let _ = ask.reply.send(state);
                }
            }
        });
        Self { store, asks }
    }

    /// The account of `uid` as of now: from the task's next read, or read alone when that
    /// read failed.
    pub async fn writer_state(&self, uid: i64) -> sqlx::Result<WriterState> {
        let (reply, answer) = oneshot::channel();
        if self.asks.send(GateAsk { uid, reply }).await.is_ok() {
            if let Ok(Some(state)) = answer.await {
                return Ok(state);
            }
        }
        self.store.writer_state(uid).await
    }
}

#[async_trait]
impl GatesWrites for WriteGate {
    async fn check_write(&self, uid: i64) -> Result<(), AppError> {
        let service = &self.service;
        let (created, suspension) = self.reader.writer_state(uid).await?;
        let now = now_millis();
        if let Some((until, reason)) = suspension.filter(|(until, _)| *until > now) {
            metrics::counter!(MODERATION_WRITES_REFUSED_TOTAL, "why" => "suspended").increment(1);
            let (en, zh) = if until == i64::MAX {
                ("for good".to_owned(), "永久".to_owned())
            } else {
                let at = chrono::DateTime::from_timestamp_millis(until)
                    .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default();
                (format!("until {at} UTC"), format!("至 {at}（UTC）"))
            };
            return Err(AppError::Suspended(Msg::owned(
                format!("your account is suspended {en}: {reason}; you may still read"),
                format!("你的账号已被暂停使用{zh}：{reason}；仍可浏览"),
            )));
        }
        if let (Some((limiter, period)), Some(created)) = (&service.new_accounts, created) {
            if now.saturating_sub(created) < *period {
                if let Err(err) = limiter.check(&uid.to_string()).await {
                    metrics::counter!(MODERATION_WRITES_REFUSED_TOTAL, "why" => "new_account")
                        .increment(1);
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

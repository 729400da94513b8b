//! The payment routes: WeChat's notifications (`POST /pay/wechat/notify`, answered in WeChat's
//! format, not enveloped), the fake provider's payment page (`GET /pay/fake/:tradeNo`) and its
//! buttons (`POST /pay/fake/:tradeNo/confirm`), and the admins' view of reconciliation findings
//! and the fixes they make (`GET /payments/discrepancies`, `POST
//! /payments/discrepancies/:id/{credit,refund,resolve}`), and refunds (`GET|POST
//! /payments/refunds`).

use platform::caller::{Admin, AdminArea};
use std::sync::Arc;

use axum::{
    body::Bytes,
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::{Html, IntoResponse, Redirect, Response},
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    actions::{with_actions, Act},
    fake::FakePay,
    model::{Action, Discrepancy, NewRefund, Refund, RefundStatus},
    notify::NotifyError,
    provider::{ProviderError, TradeState},
    service::PaymentService,
};
use platform::{
    db::now_millis,
    error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::Envelope,
    page::{decode_cursor, overfetch, page_limit, Page},
};

/// What the handlers reach.
pub struct PaymentRoutes {
    /// Payments.
    pub payments: PaymentService,
    /// The fake provider, when it is the one in use.
    pub fake: Option<FakePay>,
}

/// What these routes guard: What payment reconciliation found (`/payments/discrepancies…`); a non-admin's refusal names it.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may see payment discrepancies",
    "只有管理员可以查看支付差异",
);

/// The routes.
pub fn router(routes: PaymentRoutes) -> Router {
    Router::new()
        .route("/pay/wechat/notify", post(notify))
        .route("/pay/fake/{trade_no}", get(fake_page))
        .route("/pay/fake/{trade_no}/confirm", post(fake_confirm))
        .route("/payments/discrepancies", get(discrepancies))
        .route("/payments/discrepancies/{id}/{action}", post(act))
        .route("/payments/refunds", get(refunds).post(refund))
        .with_state(Arc::new(routes))
        .layer(axum::Extension(ADMIN_AREA))
}

/// WeChat Pay's refusal of a notification, in WeChat's format (not enveloped).
#[derive(ToSchema)]
#[allow(dead_code)] // describes the answer; never built
struct NotifyFailure {
    /// Always `FAIL`.
    code: String,
    /// Why (never our internals).
    message: String,
}

/// WeChat Pay v3's payment notification: verified and decrypted as WeChat specifies.
#[utoipa::path(
    post,
    path = "/pay/wechat/notify",
    request_body(content = Object, description = "WeChat Pay v3's notification, signed in the \
                 `Wechatpay-*` headers, its resource encrypted with the APIv3 key."),
    responses(
        (status = 200, description = "The outcome is durable (also for a repeated \
         notification): an empty body."),
        (status = 400, description = "Unreadable, or not matching our payment (recorded as a \
         discrepancy).", body = NotifyFailure),
        (status = 401, description = "Signature, timestamp or serial refused.",
         body = NotifyFailure),
        (status = 500, description = "Our failure: WeChat retries.", body = NotifyFailure),
    )
)]
async fn notify(
    State(routes): State<Arc<PaymentRoutes>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, NotifyError> {
    routes.payments.accept_notification(&headers, &body).await?;
    Ok(StatusCode::OK)
}

fn no_such_order() -> AppError {
    AppError::NotFound(Msg::new("no such order", "订单不存在"))
}

fn fake_of(routes: &PaymentRoutes) -> Result<&FakePay, AppError> {
    routes.fake.as_ref().ok_or_else(no_such_order)
}

/// Minimal HTML escaping for the page's text.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// `12345` fen → `123.45`.
pub fn yuan(fen: i64) -> String {
    format!("{}.{:02}", fen / 100, (fen % 100).abs())
}

/// The fake provider's payment page of an order, with "pay" and "fail" buttons.
#[utoipa::path(
    get,
    path = "/pay/fake/{trade_no}",
    params(("trade_no" = String, Path, description = "The order (`codeURL` names it).")),
    responses((status = 200, description = "The page (HTML); an envelope with 404001 for an \
               unknown order or without the fake provider.", content_type = "text/html",
               body = String))
)]
async fn fake_page(
    State(routes): State<Arc<PaymentRoutes>>,
    ApiPath(trade_no): ApiPath<String>,
) -> Result<Response, AppError> {
    let fake = fake_of(&routes)?;
    let order = fake
        .order(&trade_no)
        .await
        .map_err(|err| AppError::Unavailable(err.into()))?
        .ok_or_else(no_such_order)?;
    let open = order.state == TradeState::Notpay && order.expires_at > now_millis();
    let state = match order.state {
        TradeState::Success => "Paid · 已支付",
        TradeState::Payerror => "Failed · 支付失败",
        TradeState::Closed => "Closed · 已关闭",
        TradeState::Notpay if !open => "Expired · 已过期",
        _ => "Awaiting payment · 待支付",
    };
    let action = format!("/pay/fake/{}/confirm", escape(&order.trade_no));
    let buttons = if open {
        format!(
            "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"result\" \
             value=\"success\"><button type=\"submit\" id=\"pay\">Pay · 支付</button></form>\
             <form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"result\" \
             value=\"fail\"><button type=\"submit\" id=\"fail\">Fail · 支付失败</button></form>"
        )
    } else {
        String::new()
    };
    let page = format!(
        "<!doctype html><html lang=\"zh\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\"><title>webook fake payment</title></head><body><main>\
         <h1>webook fake payment · 模拟支付</h1>\
         <p>No money moves: this page stands in for WeChat Pay. · 这是模拟支付，不会扣款。</p>\
         <dl><dt>Order · 订单</dt><dd id=\"trade-no\">{}</dd>\
         <dt>Item · 商品</dt><dd id=\"description\">{}</dd>\
         <dt>Amount · 金额</dt><dd id=\"amount\">¥{}</dd>\
         <dt>Status · 状态</dt><dd id=\"status\">{state}</dd></dl>{buttons}</main></body></html>",
        escape(&order.trade_no),
        escape(&order.description),
        yuan(order.amt),
    );
    Ok(([(header::CACHE_CONTROL, "no-store")], Html(page)).into_response())
}

/// The payer's decision.
#[derive(Deserialize, ToSchema)]
struct Decision {
    /// `success` or `fail`.
    #[schema(pattern = "^(success|fail)$")]
    result: String,
}

/// What the fake provider recorded.
#[derive(Serialize, ToSchema)]
struct Decided {
    /// The order's state at the fake provider: `SUCCESS` or `PAYERROR`.
    state: TradeState,
}

/// The payer's decision: JSON `{result}` answers an envelope; the page's form (urlencoded)
/// is sent back to the page.
#[utoipa::path(
    post,
    path = "/pay/fake/{trade_no}/confirm",
    summary = "Records the payer's decision at the fake provider and notifies as WeChat would.",
    description = "",
    params(("trade_no" = String, Path, description = "The order.")),
    request_body(content(
        (Decision = "application/json"),
        (Decision = "application/x-www-form-urlencoded"),
    )),
    responses(
        (status = 200, description = "To JSON: the order's state. Code 4 once it is paid, \
         failed, closed or expired; 404001 for an unknown order.", body = Envelope<Decided>),
        (status = 303, description = "To the page's form: back to the page.",
         headers(("Location" = String, description = "`/pay/fake/{trade_no}`."))),
    )
)]
async fn fake_confirm(
    State(routes): State<Arc<PaymentRoutes>>,
    ApiPath(trade_no): ApiPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, AppError> {
    let fake = fake_of(&routes)?;
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/x-www-form-urlencoded"));
    let result = if is_form {
        url::form_urlencoded::parse(&body)
            .find(|(key, _)| key == "result")
            .map(|(_, value)| value.into_owned())
    } else {
        serde_json::from_slice::<Decision>(&body)
            .ok()
            .map(|decision| decision.result)
    };
    let paid = match result.as_deref() {
        Some("success") => true,
        Some("fail") => false,
        _ => {
            return Err(AppError::InvalidInput(Msg::new(
                "result must be \"success\" or \"fail\"",
                "result 只能是 \"success\" 或 \"fail\"",
            )))
        }
    };
    let notification = fake
        .decide(&trade_no, paid)
        .await
        .map_err(|err| match err {
            ProviderError::Refused { code, .. } if code == "ORDER_NOT_EXIST" => no_such_order(),
            ProviderError::Refused { .. } => AppError::InvalidInput(Msg::new(
                "this order can no longer be paid or failed",
                "该订单已无法支付或失败",
            )),
            other => AppError::Unavailable(other.into()),
        })?;
    // The same path as WeChat's notifications.
    routes
        .payments
        .accept_notification(&notification.header_map(), &notification.body)
        .await
        .map_err(|err| AppError::Internal(err.into()))?;
    if is_form {
        return Ok(Redirect::to(&format!("/pay/fake/{trade_no}")).into_response());
    }
    let state = if paid {
        TradeState::Success
    } else {
        TradeState::Payerror
    };
    Ok(Reply(Decided { state }).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct DiscrepancyQuery {
    /// `open`, `fixed`, `resolved` or `all` (the default).
    #[param(pattern = "^(open|fixed|resolved|all)$")]
    status: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// What reconciliation found, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/payments/discrepancies",
    security(("access_token" = [])),
    params(DiscrepancyQuery),
    responses((status = 200, description = "A page; 403002 for anyone but an admin.",
               body = Envelope<Page<Discrepancy>>))
)]
async fn discrepancies(
    State(routes): State<Arc<PaymentRoutes>>,
    _admin: Admin,
    ApiQuery(query): ApiQuery<DiscrepancyQuery>,
) -> ApiResult<Page<Discrepancy>> {
    let limit = page_limit(query.limit)?;
    let status = match query.status.as_deref() {
        None | Some("all") => None,
        Some(status @ ("open" | "fixed" | "resolved")) => Some(status),
        Some(_) => {
            return Err(AppError::InvalidInput(Msg::new(
                "status must be open, fixed, resolved or all",
                "status 只能是 open、fixed、resolved 或 all",
            )))
        }
    };
    let before = match query.cursor.as_deref() {
        Some(cursor) => decode_cursor::<1>(cursor)?[0],
        None => i64::MAX,
    };
    let items = routes
        .payments
        .store()
        .discrepancies(status, before, overfetch(limit))
        .await?;
    let mut page = Page::from_overfetched(items, limit, |last| vec![last.id]);
    page.items = page.items.into_iter().map(with_actions).collect();
    Ok(Reply(page))
}

/// What a person does about a discrepancy.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ActRequest {
    /// What was done and why, 1–1000 characters (a refund's reason: its first 80).
    note: String,
    /// For `refund`: let the author's balance go below 0 when the credit is reversed (else a
    /// refund that would is refused with a message saying so).
    #[serde(default)]
    allow_negative: bool,
}

/// Fixes an open discrepancy **(admins)**: `credit` (settle the payment as paid — the provider
/// must confirm it — so the seller credits it), `refund` (give the money back, reversing any
/// credit) or `resolve` (close with a note). Each kind offers its `actions`; who, when, what and
/// why are kept. Repeating the same action answers the closed discrepancy again.
#[utoipa::path(
    post,
    path = "/payments/discrepancies/{id}/{action}",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The discrepancy."),
           ("action" = Action, Path, description = "credit, refund or resolve.")),
    request_body = ActRequest,
    responses((status = 200, description = "Done: the discrepancy as it stands; 404001 when \
               there is no open one of that id; code 4 for an action its kind does not offer, a \
               refund the provider refuses or one that would take a balance below 0 without \
               allowNegative; 409001 while the payment's credit is still being posted; 403002 \
               for anyone but an admin.", body = Envelope<Discrepancy>))
)]
async fn act(
    State(routes): State<Arc<PaymentRoutes>>,
    admin: Admin,
    ApiPath((id, action)): ApiPath<(i64, String)>,
    ApiJson(request): ApiJson<ActRequest>,
) -> ApiResult<Discrepancy> {
    let action = Action::parse(&action).ok_or_else(|| {
        AppError::NotFound(Msg::new(
            "no such action: credit, refund or resolve",
            "没有该操作：credit、refund 或 resolve",
        ))
    })?;
    let act = Act {
        action,
        note: request.note,
        admin: admin.uid,
        via: String::new(),
        allow_negative: request.allow_negative,
    };
    Ok(Reply(routes.payments.act(id, &act).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RefundQuery {
    /// `requested`, `processing`, `abnormal`, `succeeded`, `failed` or `all` (the default).
    #[param(pattern = "^(requested|processing|abnormal|succeeded|failed|all)$")]
    status: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// Refunds, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/payments/refunds",
    security(("access_token" = [])),
    params(RefundQuery),
    responses((status = 200, description = "A page; 403002 for anyone but an admin.",
               body = Envelope<Page<Refund>>))
)]
async fn refunds(
    State(routes): State<Arc<PaymentRoutes>>,
    _admin: Admin,
    ApiQuery(query): ApiQuery<RefundQuery>,
) -> ApiResult<Page<Refund>> {
    let limit = page_limit(query.limit)?;
    let status = match query.status.as_deref() {
        None | Some("all") => None,
        Some(text) => Some(RefundStatus::parse(text).ok_or_else(|| {
            AppError::InvalidInput(Msg::new(
                "status must be requested, processing, abnormal, succeeded, failed or all",
                "status 只能是 requested、processing、abnormal、succeeded、failed 或 all",
            ))
        })?),
    };
    let before = match query.cursor.as_deref() {
        Some(cursor) => decode_cursor::<1>(cursor)?[0],
        None => i64::MAX,
    };
    let items = routes
        .payments
        .store()
        .refunds(status, before, overfetch(limit))
        .await?;
    Ok(Reply(Page::from_overfetched(items, limit, |last| {
        vec![last.id]
    })))
}

/// A refund to make.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RefundRequest {
    /// The payment's trade number (a reward's `tradeNo`).
    trade_no: String,
    /// Why, 1–80 characters (the payer sees it).
    reason: String,
    /// Let the author's balance go below 0 when the credit is reversed.
    #[serde(default)]
    allow_negative: bool,
}

/// Refunds a paid payment in full **(admins)**: the provider is asked (idempotently), the
/// ledger reverses the credit when the money is back. Asking again while a refund of the trade
/// is live answers that refund.
#[utoipa::path(
    post,
    path = "/payments/refunds",
    security(("access_token" = [])),
    request_body = RefundRequest,
    responses((status = 200, description = "The refund (`requested`, `processing` or \
               `succeeded`); 404001 for no such payment; code 4 for a payment that is not paid, \
               a reason that is empty or too long, a refund the provider refuses, or one that \
               would take a balance below 0 without allowNegative; 409001 while the payment's \
               credit is still being posted; 403002 for anyone but an admin.",
               body = Envelope<Refund>))
)]
async fn refund(
    State(routes): State<Arc<PaymentRoutes>>,
    admin: Admin,
    ApiJson(request): ApiJson<RefundRequest>,
) -> ApiResult<Refund> {
    let refund = routes
        .payments
        .refund(&NewRefund {
            trade_no: request.trade_no,
            reason: request.reason,
            requested_by: admin.uid,
            requested_via: String::new(),
            allow_negative: request.allow_negative,
        })
        .await?;
    Ok(Reply(refund))
}

/// The payment routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(notify, fake_page, fake_confirm, discrepancies, act, refunds, refund))]
pub struct PaymentsApi;

//! A model of one payment's life across instances — paid, credited, refunded, reversed —
//! checked exhaustively with [stateright](https://docs.rs/stateright): every interleaving of the
//! payer, the provider, notifications and query answers (duplicated, late, lost), two request
//! handlers, the sweep, the seller's consumer and two people acting, explored breadth-first to
//! the end.
//!
//! Run it with `cargo test -p webook --lib payment::protocol` (debug build: each test takes at
//! most ~15 s alone; the largest space is ~1.1 million states).
//!
//! # What is modelled, and the real code each action stands for
//!
//! One payment (trade) of 100 fen for a reward, split 90 to the author and 10 to the platform.
//!
//! - **Provider** (WeChat; `provider::PaymentProvider`): the order's trade state NOTPAY →
//!   USERPAYING → SUCCESS (`Scan`, `Pay`: the payer), or CLOSED by our close (only when not paid;
//!   USERPAYING answers 202 and stays), SUCCESS → REFUND when a refund succeeds. Its refunds by
//!   refund number: `refund` is idempotent by number (asking again answers the same refund); a
//!   new number is accepted only while the trade is paid and no other refund of it is under
//!   way or done (else refused); an accepted refund later ends SUCCESS or ABNORMAL
//!   (`ProviderRefund`; ABNORMAL: nothing moved, the trade stays paid).
//! - **Notifications** (`TRANSACTION.SUCCESS`, `REFUND.*`): owed from the moment the provider's
//!   state changes, delivered to any handler any number of times (`Take` with `keep`: the
//!   provider retries until acknowledged, and may repeat), in any order, never lost.
//! - **Answers** (of the active queries `watch` / `query_now`, the sweep's queries, refund
//!   requests and refund queries): a snapshot of the provider's state when asked, applied later
//!   by any handler, any number of times, or lost (`Lose`).
//! - **Handlers** (two instances): `Take` is the read of `PaymentService::apply_transaction`
//!   (the payment row) or of `apply_refund` (the refund row); `Act` is the write that follows:
//!   `PaymentStore::settle` (the conditional UPDATE from pending with its outbox event, one
//!   transaction), recording `paid_after_failure` for a success on a failed payment, parking a
//!   pending payment the provider reports refunded without a live refund of ours
//!   (`refunded`), `update_refund` (processing / failed with `refund_failed`), and
//!   `PaymentStore::complete_refund` (one transaction: the guard — a succeeded payment whose
//!   credit is not in the ledger waits, `AwaitingCredit` —, then the refund → succeeded
//!   conditionally, the reversal = the credit's lines negated, if any, the payment →
//!   refunded, the `payment_refunded` event; `refund_after_failure` when the refund was failed).
//! - **Sweep** (`reconcile::sweep`, one at a time): `SweepQuery` / `SweepClose` /
//!   `SweepRequery` are `settle_expired` (query; if NOTPAY / USERPAYING close and query again;
//!   the answer is applied as any answer); `SweepRefund` is `settle_refund` (a refund
//!   `requested` is asked again under its number, a `processing` one is queried).
//! - **Seller's consumer** (`RewardService::apply`): `Consume` applies one event of the outbox
//!   (`payment_succeeded`: `apply_paid`, the reward payed and its split posted once by the
//!   ledger's unique key; `payment_failed`: `apply_failed`; `payment_refunded`:
//!   `apply_refunded`), in any order across topics, any number of times.
//! - **People** (two admins, each at any time): `StartRefund` … `RefundAsk` are
//!   `PaymentService::refund` (the live refund answers; the provider must say SUCCESS; refused
//!   with 409 while a succeeded payment's credit is not in the ledger (`credited_lines`);
//!   `request_refund` inserts unless a live refund of the trade exists — the unique index —
//!   and `push_refund` asks the provider, its answer applied like any other, or refused →
//!   failed), started on their own or as the `refund` action of an open `paid_after_failure` /
//!   `refund_failed` discrepancy (`actions::act`, which closes it once the refund was asked);
//!   `StartCredit` / `CreditSettle` are the `credit` action (`actions::credit`: the provider
//!   must say SUCCESS, then `settle_from` the status read → succeeded, one transaction with
//!   the event; closes the discrepancy).
//!
//! Abstractions: each database transaction is one atomic step (SQLite's writer takes the
//! write lock at `BEGIN IMMEDIATE`, so its transactions are serial; see the findings for
//! PostgreSQL's READ COMMITTED, `Isolation::ReadCommitted`). A procedure's reads are separate
//! steps from its writes where code reads first and writes later (apply_transaction, refund,
//! credit), so any other step can come in between. A handler's provider call and the update
//! it makes of a refusal are one step. An answer is applied by any handler rather than by its
//! asker: more interleavings, not fewer. Messages are a set (a snapshot of each kind is either
//! in flight or not; keeping one on delivery is its duplicate). Discrepancies are recorded once
//! per (kind, trade) — their `bill_date` is empty here — and are open or closed by a person.
//! Left out: amounts and currencies (always right), parking for a stuck order, the daily
//! reconciliation of bills, the `resolve` action, the provider refunding without us. Bounds:
//! two refund numbers, two handlers, two people (one in the ABNORMAL world), at most two
//! messages in flight (one in the money-taken-after-close world; an answer beyond is lost).
//!
//! States are reduced by symmetry: handler slots and person slots are interchangeable, each
//! array is kept sorted (`State::canonical`). Paths may cycle (a duplicate that changes
//! nothing); every property is an `always`, so cycles are harmless.
//!
//! # Invariants
//!
//! Always:
//! 1. **At most one credit and one reversal** (`ONE_CREDIT_ONE_REVERSAL`).
//! 2. **A reversal only of a credit, never more reversed than credited** (`REVERSAL_OF_CREDIT`):
//!    reversals ≤ credits, the author's and the platform's balances never below 0.
//! 3. **The books net to 0** (`LEDGER_BALANCED`): clearing + author + platform = 0.
//! 4. **The provider refunds at most once** (`PROVIDER_REFUNDS_ONCE`).
//! 5. **A refunded payment stays refunded** (`REFUNDED_IS_FINAL`).
//! 6. **Discrepancies come only from the provider's anomalies**
//!    (`DISCREPANCIES_ONLY_FROM_ANOMALIES`): `paid_after_failure` only if the provider takes
//!    money for a closed order, `refund_failed` only if a refund can end ABNORMAL, `refunded` and
//!    `refund_after_failure` never. (Not asked for; it says the protocol itself needs no person.)
//!
//! At quiescence (`END_STATE`): nothing in flight (notifications, answers, events), every
//! handler, person and the sweep idle, no refund under way at the provider or ours, the payer
//! not in the middle of paying, and the sweep with nothing to do (no unparked pending
//! payment). Then:
//! - the provider has the money (SUCCESS) → our payment is succeeded, credited (credit −
//!   reversal = 1) and the reward payed, **or** it is failed, nothing credited, with
//!   `paid_after_failure` (or the `refund_failed` of a person's refund of it) open for a
//!   person — never failed with nothing open;
//! - the provider refunded → one of our refunds succeeded, the payment is refunded, the reward
//!   refunded and the books net to 0 for the author and the platform (credit − reversal = 0);
//! - the provider closed the order → our payment is failed, nothing credited, the reward failed.
//!
//! # Guards and what removing each finds
//!
//! | guard | invariant | counterexample |
//! | --- | --- | --- |
//! | `awaits_credit` (complete_refund's guard) | end state | an admin reads the payment pending, it settles, the 409 check sees the pending read and an empty ledger; the refund completes before the credit: nothing reversed, then the consumer posts the credit |
//! | `settle_conditional` | 5, end state | a handler reads the payment pending; a refund of the (paid, pending) payment completes; the stale success settles it succeeded again and the consumer credits it |
//! | `close_before_fail` | 6 | the sweep fails the order on NOTPAY without closing it; the payer pays |
//! | `one_live_refund` (the unique index), with a provider that takes a second refund | 4, 2 | two admins both find no live refund and insert one each; the provider refunds both |
//! | `refuse_uncredited` (the 409) | — | redundant: without it the refund waits in `AwaitingCredit` |
//!
//! # Findings, and what the code does since
//!
//! This model was written against the revision before the review fixes of issue 48; it found
//! two problems, both fixed in the code since, and both kept here as broken variants the
//! checker must catch:
//!
//! - **On PostgreSQL, `complete_refund`'s guard raced the settle** (`END_STATE`, test
//!   `without_the_row_lock_a_settle_between_guard_and_update_credits_a_refunded_payment`).
//!   Under READ COMMITTED a plain-`SELECT` guard let this happen: an admin refunds a payment
//!   paid at the provider whose notification is not applied yet (ours pending); the provider's
//!   REFUND.SUCCESS reaches `complete_refund`, whose guard sees the payment pending; the
//!   TRANSACTION.SUCCESS handler's `settle` commits pending → succeeded; `complete_refund` goes
//!   on with nothing to reverse and marks the payment refunded; the consumer then posts the
//!   credit. **Since:** `complete_refund` first locks the payment row (`UPDATE payments … RETURNING
//!   status`, `PaymentStore::lock_awaiting_credit`), so guard and update are atomic with respect
//!   to `settle` — the model's `Isolation::Atomic`, which checks clean; and `apply_paid` no
//!   longer credits a refunded reward.
//! - **A second failed refund was told to nobody** (`END_STATE`, test
//!   `with_refund_discrepancies_keyed_per_trade_a_second_failed_refund_is_told_to_nobody`): the
//!   discrepancy table is unique per (bill_date, kind, trade) and refund findings had an empty
//!   `bill_date`, so once a person closed a trade's `refund_failed` by asking again, a second
//!   failure recorded nothing. **Since:** a refund's discrepancies are keyed by its refund number
//!   (their `bill_date`), and an ABNORMAL refund stays under way (`abnormal`, completing if the
//!   provider later reports success) — only CLOSED fails it. The model's "ABNORMAL" world is the
//!   code's CLOSED path now; modelling the per-refund key (one discrepancy slot per refund
//!   number) and the `abnormal` state is left to do: the test keeps the old per-trade key as a
//!   broken variant.

use std::collections::BTreeSet;

use stateright::{Checker, HasDiscoveries, Model, Property};

/// Amount of the payment and its split (`RewardService::split`).
const AMT: i16 = 100;
const AUTHOR: i16 = 90;
const PLATFORM: i16 = AMT - AUTHOR;

/// Refund numbers (rows of `payment_refunds`, refunds at the provider).
const REFUNDS: usize = 2;
/// Handler slots (instances applying notifications and answers).
const HANDLERS: usize = 2;
/// Person slots (admins acting at once).
const PERSONS: usize = 2;

/// The protocol's guards; each can be removed to see what it protects.
#[derive(Clone, Copy, Debug)]
struct Guards {
    /// `complete_refund` waits (`AwaitingCredit`) while a succeeded payment's credit is not in
    /// the ledger.
    awaits_credit: bool,
    /// `settle` changes only a pending payment (`AND status = 'pending'`).
    settle_conditional: bool,
    /// `settle_expired` closes an open order and asks again before failing it.
    close_before_fail: bool,
    /// At most one live refund per trade (the unique index; `request_refund`).
    one_live_refund: bool,
    /// `credited_lines`: 409 while a succeeded payment's credit is not in the ledger.
    refuse_uncredited: bool,
}

impl Guards {
    const ALL: Guards = Guards {
        awaits_credit: true,
        settle_conditional: true,
        close_before_fail: true,
        one_live_refund: true,
        refuse_uncredited: true,
    };
}

/// How a database transaction is isolated from the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isolation {
    /// Each transaction is one step (SQLite: the writer begins `IMMEDIATE`).
    Atomic,
    /// PostgreSQL's default: each statement sees what committed before it. `complete_refund`
    /// becomes two steps — its guard `SELECT`, then the rest (whose `UPDATE payments … WHERE
    /// status IN (…)` sees the latest row).
    ReadCommitted,
}

/// What the provider may do beyond the protocol's happy paths.
#[derive(Clone, Copy, Debug)]
struct World {
    /// A refund may end ABNORMAL (nothing moved; asked again under a new number).
    abnormal: bool,
    /// The provider takes the money for an order it reported closed (how `paid_after_failure`
    /// arises).
    paid_after_close: bool,
    /// The provider accepts a second refund number for a trade with one under way or done.
    lenient_refunds: bool,
    /// Messages in flight at once (a bound of the model); an answer beyond is lost.
    inflight: u32,
}

#[derive(Clone, Copy, Debug)]
struct Config {
    guards: Guards,
    isolation: Isolation,
    world: World,
    /// Person slots that act (at most `PERSONS`).
    persons: usize,
}

impl Config {
    /// The protocol as specified, in a provider world with ABNORMAL refunds.
    fn spec() -> Self {
        Config {
            guards: Guards::ALL,
            isolation: Isolation::Atomic,
            world: World {
                abnormal: true,
                paid_after_close: false,
                lenient_refunds: false,
                inflight: 2,
            },
            persons: PERSONS,
        }
    }
}

/// The provider's trade state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Trade {
    NotPay,
    UserPaying,
    Success,
    Closed,
    Refund,
}

/// A refund at the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum ProviderRefund {
    Processing,
    Success,
    Abnormal,
}

/// Our payment's status (`PaymentStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Pay {
    Pending,
    Succeeded,
    Failed,
    Refunded,
}

/// Our refund's status (`RefundStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Ours {
    Requested,
    Processing,
    Succeeded,
    Failed,
}

impl Ours {
    fn under_way(self) -> bool {
        matches!(self, Ours::Requested | Ours::Processing)
    }

    /// `live_refund`: not failed.
    fn live(self) -> bool {
        self != Ours::Failed
    }
}

/// The reward's status (`rewards.status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Reward {
    Init,
    Payed,
    Failed,
    Refunded,
}

/// Discrepancy kinds the protocol records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    PaidAfterFailure,
    Refunded,
    RefundFailed,
    RefundAfterFailure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Disc {
    None,
    Open,
    Closed,
}

/// Outbox topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Topic {
    Succeeded,
    Failed,
    Refunded,
}

impl Topic {
    fn of(status: Pay) -> Option<Topic> {
        match status {
            Pay::Succeeded => Some(Topic::Succeeded),
            Pay::Failed => Some(Topic::Failed),
            Pay::Refunded => Some(Topic::Refunded),
            Pay::Pending => None,
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// What the provider says, in a notification or an answer (NOTPAY / USERPAYING answers
/// change nothing and are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Msg {
    Txn(Trade),
    Refund(u8, ProviderRefund),
}

impl Msg {
    fn bit(self) -> u16 {
        let index = match self {
            Msg::Txn(Trade::Success) => 0,
            Msg::Txn(Trade::Closed) => 1,
            Msg::Txn(Trade::Refund) => 2,
            Msg::Txn(_) => unreachable!("open states are not sent"),
            Msg::Refund(n, state) => 3 + 3 * n as u16 + state as u16,
        };
        1 << index
    }

    fn all() -> Vec<Msg> {
        let mut all = vec![
            Msg::Txn(Trade::Success),
            Msg::Txn(Trade::Closed),
            Msg::Txn(Trade::Refund),
        ];
        for n in 0..REFUNDS as u8 {
            for state in [
                ProviderRefund::Processing,
                ProviderRefund::Success,
                ProviderRefund::Abnormal,
            ] {
                all.push(Msg::Refund(n, state));
            }
        }
        all
    }
}

/// A handler between its read and its write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Handler {
    Idle,
    /// `apply_transaction` read the payment as `read`; the provider said `seen`.
    Txn {
        seen: Trade,
        read: Pay,
    },
    /// `apply_refund` read refund `n` as `read`; the provider said `result`.
    Refund {
        n: u8,
        result: ProviderRefund,
        read: Ours,
    },
    /// READ COMMITTED only: `complete_refund`'s guard passed; the rest is to run.
    Completing {
        n: u8,
        read: Ours,
    },
}

/// A person between the steps of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Person {
    Idle,
    /// `refund`: no live refund, the payment read as `read`; next: the provider's SUCCESS and
    /// the ledger's credit. `closes`: the discrepancy acted on.
    RefundCheck {
        read: Pay,
        closes: Option<Kind>,
    },
    RefundInsert {
        closes: Option<Kind>,
    },
    RefundAsk {
        n: u8,
        closes: Option<Kind>,
    },
    /// `credit`: the payment read as `from`, the provider said SUCCESS.
    CreditSettle {
        from: Pay,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Sweep {
    Idle,
    Close,
    Requery,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct State {
    trade: Trade,
    provider_refunds: [Option<ProviderRefund>; REFUNDS],
    payment: Pay,
    parked: bool,
    refunds: [Option<Ours>; REFUNDS],
    reward: Reward,
    discrepancies: [Disc; 4],
    /// Credit postings (`reward` biz) and reversal postings (`refund` biz, per refund row).
    credits: u8,
    reversed: [bool; REFUNDS],
    /// Balances: clearing, the author, the platform.
    clearing: i16,
    author: i16,
    platform: i16,
    /// Messages in flight (by `Msg::bit`): notifications and answers of the same content are
    /// one message, delivered any number of times.
    inflight: u16,
    /// Those of them that are notifications: delivered at least once, never lost.
    owed: u16,
    /// Events in the outbox not yet consumed (by `Topic::bit`).
    outbox: u8,
    handlers: [Handler; HANDLERS],
    persons: [Person; PERSONS],
    sweep: Sweep,
    /// History, for the properties: the payment was refunded once; a refund waited for the
    /// credit.
    ever_refunded: bool,
    awaited_credit: bool,
}

impl State {
    fn init() -> Self {
        State {
            trade: Trade::NotPay,
            provider_refunds: [None; REFUNDS],
            payment: Pay::Pending,
            parked: false,
            refunds: [None; REFUNDS],
            reward: Reward::Init,
            discrepancies: [Disc::None; 4],
            credits: 0,
            reversed: [false; REFUNDS],
            clearing: 0,
            author: 0,
            platform: 0,
            inflight: 0,
            owed: 0,
            outbox: 0,
            handlers: [Handler::Idle; HANDLERS],
            persons: [Person::Idle; PERSONS],
            sweep: Sweep::Idle,
            ever_refunded: false,
            awaited_credit: false,
        }
    }

    fn canonical(mut self) -> Self {
        self.handlers.sort();
        self.persons.sort();
        self
    }

    fn disc(&self, kind: Kind) -> Disc {
        self.discrepancies[kind as usize]
    }

    /// `record_discrepancy`: once per (kind, trade).
    fn record(&mut self, kind: Kind) {
        if self.disc(kind) == Disc::None {
            self.discrepancies[kind as usize] = Disc::Open;
        }
    }

    /// `close_discrepancy`: only an open one.
    fn close(&mut self, kind: Option<Kind>) {
        if let Some(kind) = kind {
            if self.disc(kind) == Disc::Open {
                self.discrepancies[kind as usize] = Disc::Closed;
            }
        }
    }

    fn busy_persons(&self) -> usize {
        self.persons.iter().filter(|p| **p != Person::Idle).count()
    }

    fn live_refund(&self) -> Option<u8> {
        (0..REFUNDS as u8).find(|&n| self.refunds[n as usize].is_some_and(Ours::live))
    }

    fn reversals(&self) -> u8 {
        self.reversed.iter().filter(|&&r| r).count() as u8
    }

    fn record_event(&mut self) {
        if let Some(topic) = Topic::of(self.payment) {
            self.outbox |= topic.bit();
        }
    }

    /// An answer in flight (lost when `world.inflight` messages already are).
    fn answer(&mut self, world: World, msg: Msg) {
        if (self.inflight | msg.bit()).count_ones() <= world.inflight {
            self.inflight |= msg.bit();
        }
    }

    /// A notification owed.
    fn notify(&mut self, msg: Msg) {
        self.inflight |= msg.bit();
        self.owed |= msg.bit();
    }

    fn answer_trade(&mut self, world: World) {
        if matches!(self.trade, Trade::Success | Trade::Closed | Trade::Refund) {
            self.answer(world, Msg::Txn(self.trade));
        }
    }

    /// `settle_from(from → status)`: one transaction with its event.
    fn settle(&mut self, guards: Guards, from: Pay, status: Pay) -> Settled {
        if self.payment == from || !guards.settle_conditional {
            self.payment = status;
            self.parked = false;
            self.record_event();
            Settled::Changed
        } else if self.payment == status {
            Settled::Already
        } else {
            Settled::Contrary(self.payment)
        }
    }

    /// The provider's `refund` of number `n`; false when it refuses.
    fn provider_refund(&mut self, world: World, n: u8) -> bool {
        if let Some(state) = self.provider_refunds[n as usize] {
            self.answer(world, Msg::Refund(n, state));
            return true;
        }
        let busy = self.provider_refunds.iter().any(|r| {
            matches!(
                r,
                Some(ProviderRefund::Processing | ProviderRefund::Success)
            )
        });
        let paid =
            self.trade == Trade::Success || (world.lenient_refunds && self.trade == Trade::Refund);
        if paid && (!busy || world.lenient_refunds) {
            self.provider_refunds[n as usize] = Some(ProviderRefund::Processing);
            self.answer(world, Msg::Refund(n, ProviderRefund::Processing));
            true
        } else {
            false
        }
    }

    /// `update_refund(failed)` of a refused request.
    fn refused(&mut self, n: u8) {
        if let Some(ours) = &mut self.refunds[n as usize] {
            if ours.under_way() {
                *ours = Ours::Failed;
            }
        }
    }

    /// `complete_refund`'s guard: true when it goes on.
    fn completion_guard(&mut self, guards: Guards) -> bool {
        if guards.awaits_credit && self.payment == Pay::Succeeded && self.credits == 0 {
            self.awaited_credit = true;
            return false;
        }
        true
    }

    /// `complete_refund` after its guard (and `apply_refund`'s `refund_after_failure`).
    fn complete_rest(&mut self, n: u8, read: Ours) {
        let i = n as usize;
        if !self.refunds[i].is_some_and(Ours::under_way) {
            if read == Ours::Failed {
                self.record(Kind::RefundAfterFailure);
            }
            return;
        }
        self.refunds[i] = Some(Ours::Succeeded);
        if self.credits > 0 && !self.reversed[i] {
            self.reversed[i] = true;
            self.clearing += AMT;
            self.author -= AUTHOR;
            self.platform -= PLATFORM;
        }
        if self.payment != Pay::Refunded {
            self.payment = Pay::Refunded;
            self.parked = false;
        }
        self.ever_refunded = true;
        self.record_event();
    }

    /// Nothing in flight, nobody mid-way, nothing left for the sweep, the provider or the payer.
    fn quiescent(&self) -> bool {
        self.inflight == 0
            && self.outbox == 0
            && self.handlers.iter().all(|h| *h == Handler::Idle)
            && self.persons.iter().all(|p| *p == Person::Idle)
            && self.sweep == Sweep::Idle
            && !self
                .provider_refunds
                .contains(&Some(ProviderRefund::Processing))
            && !self.refunds.iter().any(|r| r.is_some_and(Ours::under_way))
            && (self.payment != Pay::Pending || self.parked)
            && self.trade != Trade::UserPaying
    }

    /// The end-state check (module docs).
    fn end_state_ok(&self) -> bool {
        let net = self.author == 0 && self.platform == 0 && self.clearing == 0;
        match self.trade {
            Trade::Success => {
                let credited = self.payment == Pay::Succeeded
                    && self.credits == 1
                    && self.reversals() == 0
                    && self.reward == Reward::Payed;
                // Told: the failure, or the failed refund a person asked for it.
                let told = self.disc(Kind::PaidAfterFailure) == Disc::Open
                    || self.disc(Kind::RefundFailed) == Disc::Open;
                let for_a_person = self.payment == Pay::Failed && told && net;
                credited || for_a_person
            }
            Trade::Refund => {
                self.refunds.contains(&Some(Ours::Succeeded))
                    && self.payment == Pay::Refunded
                    && self.reward == Reward::Refunded
                    && net
            }
            Trade::Closed => {
                self.payment == Pay::Failed && self.credits == 0 && self.reward == Reward::Failed
            }
            Trade::NotPay | Trade::UserPaying => self.payment == Pay::Pending && net,
        }
    }
}

enum Settled {
    Changed,
    Already,
    Contrary(Pay),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// The payer scans the code: NOTPAY → USERPAYING.
    Scan,
    /// The payer pays: USERPAYING → SUCCESS (or CLOSED → SUCCESS, `paid_after_close`).
    Pay,
    /// An active query of the pending payment (`watch`, `query_now`).
    Query,
    SweepQuery,
    SweepClose,
    SweepRequery,
    SweepRefund(u8),
    /// The provider finishes refund `n`: SUCCESS (true) or ABNORMAL.
    ProviderRefund(u8, bool),
    /// A handler takes a message; `keep`: it comes again.
    Take {
        handler: u8,
        msg: Msg,
        keep: bool,
    },
    Act(u8),
    Lose(Msg),
    /// A person starts a refund, on their own or as the action of an open discrepancy.
    StartRefund(u8, Option<Kind>),
    RefundCheck(u8),
    RefundInsert(u8),
    RefundAsk(u8),
    StartCredit(u8),
    CreditSettle(u8),
    /// The consumer applies an event; `keep`: it is delivered again.
    Consume(Topic, bool),
}

struct PaymentModel {
    config: Config,
}

impl PaymentModel {
    fn step(&self, s: &mut State, action: Action) -> Option<()> {
        let Config {
            guards,
            isolation,
            world,
            persons,
        } = self.config;
        match action {
            Action::Scan => {
                (s.trade == Trade::NotPay).then_some(())?;
                s.trade = Trade::UserPaying;
            }
            Action::Pay => {
                let closed_paid = world.paid_after_close && s.trade == Trade::Closed;
                (s.trade == Trade::UserPaying || closed_paid).then_some(())?;
                s.trade = Trade::Success;
                s.notify(Msg::Txn(Trade::Success));
            }
            Action::Query => {
                (s.payment == Pay::Pending && !s.parked).then_some(())?;
                s.answer_trade(world);
            }
            Action::SweepQuery => {
                (s.sweep == Sweep::Idle && s.payment == Pay::Pending && !s.parked).then_some(())?;
                match s.trade {
                    Trade::NotPay | Trade::UserPaying if guards.close_before_fail => {
                        s.sweep = Sweep::Close;
                    }
                    // Broken: fails the open order on the first answer.
                    Trade::NotPay | Trade::UserPaying => s.answer(world, Msg::Txn(Trade::Closed)),
                    _ => s.answer_trade(world),
                }
            }
            Action::SweepClose => {
                (s.sweep == Sweep::Close).then_some(())?;
                match s.trade {
                    Trade::NotPay => s.trade = Trade::Closed,
                    // 202 USER_PAYING, 400 ORDERPAID: the second look decides.
                    Trade::UserPaying | Trade::Success | Trade::Closed => {}
                    // Another error: the sweep goes on with the next payment.
                    Trade::Refund => {
                        s.sweep = Sweep::Idle;
                        return Some(());
                    }
                }
                s.sweep = Sweep::Requery;
            }
            Action::SweepRequery => {
                (s.sweep == Sweep::Requery).then_some(())?;
                s.answer_trade(world);
                s.sweep = Sweep::Idle;
            }
            Action::SweepRefund(n) => {
                (s.sweep == Sweep::Idle).then_some(())?;
                match s.refunds[n as usize]? {
                    Ours::Requested => {
                        if !s.provider_refund(world, n) {
                            s.refused(n);
                        }
                    }
                    Ours::Processing => {
                        let state = s.provider_refunds[n as usize]?;
                        s.answer(world, Msg::Refund(n, state));
                    }
                    Ours::Succeeded | Ours::Failed => return None,
                }
            }
            Action::ProviderRefund(n, success) => {
                let i = n as usize;
                (s.provider_refunds[i] == Some(ProviderRefund::Processing)).then_some(())?;
                let state = if success {
                    s.trade = Trade::Refund;
                    ProviderRefund::Success
                } else {
                    world.abnormal.then_some(())?;
                    ProviderRefund::Abnormal
                };
                s.provider_refunds[i] = Some(state);
                s.notify(Msg::Refund(n, state));
            }
            Action::Take { handler, msg, keep } => {
                let h = handler as usize;
                (s.handlers[h] == Handler::Idle && s.inflight & msg.bit() != 0).then_some(())?;
                if !keep {
                    s.inflight &= !msg.bit();
                    s.owed &= !msg.bit();
                }
                s.handlers[h] = match msg {
                    Msg::Txn(seen) => Handler::Txn {
                        seen,
                        read: s.payment,
                    },
                    Msg::Refund(n, result) => Handler::Refund {
                        n,
                        result,
                        read: s.refunds[n as usize]?,
                    },
                };
            }
            Action::Lose(msg) => {
                (s.inflight & !s.owed & msg.bit() != 0).then_some(())?;
                s.inflight &= !msg.bit();
            }
            Action::Act(handler) => {
                let h = handler as usize;
                let job = s.handlers[h];
                s.handlers[h] = Handler::Idle;
                match job {
                    Handler::Idle => return None,
                    Handler::Txn {
                        seen: Trade::Refund,
                        read,
                    } => {
                        // Ours (its own notification settles it), or refunded already.
                        if s.live_refund().is_none() && read != Pay::Refunded {
                            s.record(Kind::Refunded);
                            if read == Pay::Pending && s.payment == Pay::Pending {
                                s.parked = true;
                            }
                        }
                    }
                    Handler::Txn { seen, read } => {
                        let status = if seen == Trade::Success {
                            Pay::Succeeded
                        } else {
                            Pay::Failed
                        };
                        let contrary = match read {
                            Pay::Pending => match s.settle(guards, Pay::Pending, status) {
                                Settled::Contrary(now) => Some(now),
                                Settled::Changed | Settled::Already => None,
                            },
                            read if read == status => None,
                            read => Some(read),
                        };
                        if status == Pay::Succeeded && contrary == Some(Pay::Failed) {
                            s.record(Kind::PaidAfterFailure);
                        }
                    }
                    Handler::Refund { n, result, read } => match result {
                        ProviderRefund::Processing => {
                            if let Some(ours) = &mut s.refunds[n as usize] {
                                if ours.under_way() {
                                    *ours = Ours::Processing;
                                }
                            }
                        }
                        ProviderRefund::Abnormal => {
                            let i = n as usize;
                            if s.refunds[i].is_some_and(Ours::under_way) {
                                s.refunds[i] = Some(Ours::Failed);
                                s.record(Kind::RefundFailed);
                            }
                        }
                        ProviderRefund::Success => {
                            if s.completion_guard(guards) {
                                match isolation {
                                    Isolation::Atomic => s.complete_rest(n, read),
                                    Isolation::ReadCommitted => {
                                        s.handlers[h] = Handler::Completing { n, read }
                                    }
                                }
                            }
                        }
                    },
                    Handler::Completing { n, read } => s.complete_rest(n, read),
                }
            }
            Action::StartRefund(p, closes) => {
                let p = p as usize;
                (s.persons[p] == Person::Idle && s.busy_persons() < persons).then_some(())?;
                if let Some(kind) = closes {
                    (s.disc(kind) == Disc::Open).then_some(())?;
                }
                if guards.one_live_refund && s.live_refund().is_some() {
                    // `refund` answers the live refund; the action is done.
                    s.close(closes);
                } else {
                    s.persons[p] = Person::RefundCheck {
                        read: s.payment,
                        closes,
                    };
                }
            }
            Action::RefundCheck(p) => {
                let p = p as usize;
                let Person::RefundCheck { read, closes } = s.persons[p] else {
                    return None;
                };
                let refused = s.trade != Trade::Success
                    || (guards.refuse_uncredited && s.credits == 0 && read == Pay::Succeeded);
                s.persons[p] = if refused {
                    Person::Idle
                } else {
                    Person::RefundInsert { closes }
                };
            }
            Action::RefundInsert(p) => {
                let p = p as usize;
                let Person::RefundInsert { closes } = s.persons[p] else {
                    return None;
                };
                let live = if guards.one_live_refund {
                    s.live_refund()
                } else {
                    None
                };
                let n = match live {
                    Some(n) => Some(n),
                    None => {
                        let free = s.refunds.iter().position(Option::is_none).map(|n| n as u8);
                        if let Some(n) = free {
                            s.refunds[n as usize] = Some(Ours::Requested);
                        }
                        free
                    }
                };
                // No free refund number: past the model's bound, the person gives up.
                s.persons[p] = match n {
                    Some(n) => Person::RefundAsk { n, closes },
                    None => Person::Idle,
                };
            }
            Action::RefundAsk(p) => {
                let p = p as usize;
                let Person::RefundAsk { n, closes } = s.persons[p] else {
                    return None;
                };
                s.persons[p] = Person::Idle;
                if s.provider_refund(world, n) {
                    s.close(closes);
                } else {
                    s.refused(n);
                }
            }
            Action::StartCredit(p) => {
                let p = p as usize;
                (s.persons[p] == Person::Idle
                    && s.busy_persons() < persons
                    && s.disc(Kind::PaidAfterFailure) == Disc::Open)
                    .then_some(())?;
                if s.payment == Pay::Succeeded {
                    s.close(Some(Kind::PaidAfterFailure));
                } else if s.trade == Trade::Success {
                    s.persons[p] = Person::CreditSettle { from: s.payment };
                } else {
                    // The provider does not have it paid: refused, nothing changes.
                    return None;
                }
            }
            Action::CreditSettle(p) => {
                let p = p as usize;
                let Person::CreditSettle { from } = s.persons[p] else {
                    return None;
                };
                s.persons[p] = Person::Idle;
                match s.settle(guards, from, Pay::Succeeded) {
                    Settled::Changed | Settled::Already => s.close(Some(Kind::PaidAfterFailure)),
                    Settled::Contrary(_) => {}
                }
            }
            Action::Consume(topic, keep) => {
                (s.outbox & topic.bit() != 0).then_some(())?;
                if !keep {
                    s.outbox &= !topic.bit();
                }
                match topic {
                    Topic::Succeeded => {
                        // `apply_paid`: mark payed (from init or failed), post the split once.
                        if matches!(s.reward, Reward::Init | Reward::Failed) {
                            s.reward = Reward::Payed;
                        }
                        if s.credits == 0 {
                            s.credits = 1;
                            s.clearing -= AMT;
                            s.author += AUTHOR;
                            s.platform += PLATFORM;
                        }
                    }
                    Topic::Failed => {
                        if s.reward == Reward::Init {
                            s.reward = Reward::Failed;
                        }
                    }
                    Topic::Refunded => s.reward = Reward::Refunded,
                }
            }
        }
        Some(())
    }
}

impl Model for PaymentModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::init()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        actions.extend([
            Action::Scan,
            Action::Pay,
            Action::Query,
            Action::SweepQuery,
            Action::SweepClose,
            Action::SweepRequery,
        ]);
        for n in 0..REFUNDS as u8 {
            actions.extend([
                Action::SweepRefund(n),
                Action::ProviderRefund(n, true),
                Action::ProviderRefund(n, false),
            ]);
        }
        // Handler slots are interchangeable: the first idle one stands for all.
        let idle = state.handlers.iter().position(|h| *h == Handler::Idle);
        for msg in Msg::all() {
            if state.inflight & msg.bit() == 0 {
                continue;
            }
            actions.push(Action::Lose(msg));
            if let Some(h) = idle {
                for keep in [false, true] {
                    actions.push(Action::Take {
                        handler: h as u8,
                        msg,
                        keep,
                    });
                }
            }
        }
        for h in 0..HANDLERS as u8 {
            actions.push(Action::Act(h));
        }
        if let Some(p) = state.persons.iter().position(|p| *p == Person::Idle) {
            let p = p as u8;
            actions.extend([
                Action::StartRefund(p, None),
                Action::StartRefund(p, Some(Kind::PaidAfterFailure)),
                Action::StartRefund(p, Some(Kind::RefundFailed)),
                Action::StartCredit(p),
            ]);
        }
        for p in 0..PERSONS as u8 {
            actions.extend([
                Action::RefundCheck(p),
                Action::RefundInsert(p),
                Action::RefundAsk(p),
                Action::CreditSettle(p),
            ]);
        }
        for topic in [Topic::Succeeded, Topic::Failed, Topic::Refunded] {
            actions.extend([Action::Consume(topic, false), Action::Consume(topic, true)]);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut next = *last;
        self.step(&mut next, action)?;
        let next = next.canonical();
        (next != *last).then_some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(ONE_CREDIT_ONE_REVERSAL, |_, s: &State| {
                s.credits <= 1 && s.reversals() <= 1
            }),
            Property::always(REVERSAL_OF_CREDIT, |_, s: &State| {
                s.reversals() <= s.credits && s.author >= 0 && s.platform >= 0
            }),
            Property::always(LEDGER_BALANCED, |_, s: &State| {
                s.clearing + s.author + s.platform == 0
            }),
            Property::always(PROVIDER_REFUNDS_ONCE, |_, s: &State| {
                s.provider_refunds
                    .iter()
                    .filter(|r| **r == Some(ProviderRefund::Success))
                    .count()
                    <= 1
            }),
            Property::always(REFUNDED_IS_FINAL, |_, s: &State| {
                !s.ever_refunded || s.payment == Pay::Refunded
            }),
            Property::always(
                DISCREPANCIES_ONLY_FROM_ANOMALIES,
                |m: &PaymentModel, s: &State| {
                    let world = m.config.world;
                    (world.paid_after_close || s.disc(Kind::PaidAfterFailure) == Disc::None)
                        && (world.abnormal || s.disc(Kind::RefundFailed) == Disc::None)
                        && s.disc(Kind::Refunded) == Disc::None
                        && s.disc(Kind::RefundAfterFailure) == Disc::None
                },
            ),
            Property::always(END_STATE, |_, s: &State| !s.quiescent() || s.end_state_ok()),
            Property::sometimes("quiescent: paid and credited", |_, s: &State| {
                s.quiescent() && s.trade == Trade::Success && s.payment == Pay::Succeeded
            }),
            Property::sometimes("quiescent: refunded and reversed", |_, s: &State| {
                s.quiescent() && s.trade == Trade::Refund && s.reversals() == 1
            }),
            Property::sometimes("quiescent: closed and failed", |_, s: &State| {
                s.quiescent() && s.trade == Trade::Closed
            }),
            Property::sometimes("a refund waits for the credit", |_, s: &State| {
                s.awaited_credit
            }),
        ];
        let world = self.config.world;
        if world.abnormal {
            properties.push(Property::sometimes(
                "a refund is asked again under a new number",
                |_, s: &State| s.refunds[1].is_some(),
            ));
        }
        if world.paid_after_close {
            properties.push(Property::sometimes(
                "quiescent: paid after failure, credited by a person",
                |_, s: &State| {
                    s.quiescent()
                        && s.disc(Kind::PaidAfterFailure) == Disc::Closed
                        && s.payment == Pay::Succeeded
                },
            ));
            properties.push(Property::sometimes(
                "quiescent: paid after failure, refunded by a person",
                |_, s: &State| {
                    s.quiescent()
                        && s.disc(Kind::PaidAfterFailure) == Disc::Closed
                        && s.trade == Trade::Refund
                },
            ));
            properties.push(Property::sometimes(
                "quiescent: paid after failure, open for a person",
                |_, s: &State| s.quiescent() && s.disc(Kind::PaidAfterFailure) == Disc::Open,
            ));
        }
        properties
    }
}

const ONE_CREDIT_ONE_REVERSAL: &str = "at most one credit and one reversal";
const REVERSAL_OF_CREDIT: &str = "a reversal only of a credit, never more reversed than credited";
const LEDGER_BALANCED: &str = "the books net to 0";
const PROVIDER_REFUNDS_ONCE: &str = "the provider refunds at most once";
const REFUNDED_IS_FINAL: &str = "a refunded payment stays refunded";
const DISCREPANCIES_ONLY_FROM_ANOMALIES: &str = "discrepancies come only from provider anomalies";
const END_STATE: &str = "at quiescence, our books agree with the provider";

const SAFETY: [&str; 7] = [
    ONE_CREDIT_ONE_REVERSAL,
    REVERSAL_OF_CREDIT,
    LEDGER_BALANCED,
    PROVIDER_REFUNDS_ONCE,
    REFUNDED_IS_FINAL,
    DISCREPANCIES_ONLY_FROM_ANOMALIES,
    END_STATE,
];

fn model(config: Config) -> PaymentModel {
    PaymentModel { config }
}

/// Explores every reachable state; prints the count and time.
fn check_all(config: Config) -> impl Checker<PaymentModel> {
    let start = std::time::Instant::now();
    let checker = model(config).checker().spawn_bfs().join();
    eprintln!(
        "{} unique states ({} generated) in {:?}",
        checker.unique_state_count(),
        checker.state_count(),
        start.elapsed()
    );
    checker
}

/// Explores until `property` has a discovery; its path's actions.
fn counterexample(config: Config, property: &'static str) -> Vec<Action> {
    let path = model(config)
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join()
        .assert_any_discovery(property)
        .into_actions();
    eprintln!("{property}: {path:#?}");
    path
}

#[test]
fn protocol_as_specified_keeps_every_invariant() {
    let mut config = Config::spec();
    config.world.abnormal = false;
    let checker = check_all(config);
    // Every always property holds, every sometimes property has an example, and the whole
    // space was explored. 261,978 unique states when written (1,682,767 generated), ~3 s.
    checker.assert_properties();
    assert!(checker.unique_state_count() > 100_000);
}

#[test]
fn refunds_ending_abnormal_are_asked_again_and_every_invariant_holds() {
    let mut config = Config::spec();
    config.persons = 1;
    let checker = check_all(config);
    checker.assert_properties();
    // 915,837 unique states when written, ~12 s.
    assert!(checker.unique_state_count() > 400_000);
}

#[test]
fn money_taken_after_close_is_left_to_a_person_who_credits_or_refunds_it() {
    let mut config = Config::spec();
    config.world.abnormal = false;
    config.world.paid_after_close = true;
    config.world.inflight = 1;
    let checker = check_all(config);
    checker.assert_properties();
    // 1,063,202 unique states when written, ~14 s.
    assert!(checker.unique_state_count() > 400_000);
}

/// The spec without ABNORMAL refunds: the smallest world where each guard matters.
fn small() -> Config {
    let mut config = Config::spec();
    config.world.abnormal = false;
    config
}

#[test]
fn without_the_completion_guard_a_credit_lands_after_the_refund() {
    let mut config = small();
    config.guards.awaits_credit = false;
    let path = counterexample(config, END_STATE);
    assert!(path.contains(&Action::Consume(Topic::Succeeded, false)));
}

#[test]
fn without_the_conditional_settle_a_stale_success_unrefunds_a_payment() {
    let mut config = small();
    config.guards.settle_conditional = false;
    counterexample(config, REFUNDED_IS_FINAL);
}

#[test]
fn without_close_before_fail_a_payer_pays_an_order_we_failed() {
    let mut config = small();
    config.guards.close_before_fail = false;
    let path = counterexample(config, DISCREPANCIES_ONLY_FROM_ANOMALIES);
    assert!(path.contains(&Action::Pay));
}

#[test]
fn without_one_live_refund_a_lenient_provider_refunds_twice() {
    let mut config = small();
    config.world.lenient_refunds = true;
    config.guards.one_live_refund = false;
    counterexample(config, PROVIDER_REFUNDS_ONCE);
    counterexample(config, REVERSAL_OF_CREDIT);
}

#[test]
fn with_one_live_refund_even_a_lenient_provider_refunds_once() {
    let mut config = small();
    config.world.lenient_refunds = true;
    let checker = check_all(config);
    for property in SAFETY {
        checker.assert_no_discovery(property);
    }
}

#[test]
fn the_409_for_an_uncredited_payment_is_redundant_the_refund_waits_instead() {
    let mut config = small();
    config.guards.refuse_uncredited = false;
    let checker = check_all(config);
    checker.assert_properties();
}

#[test]
fn without_the_row_lock_a_settle_between_guard_and_update_credits_a_refunded_payment() {
    let mut config = small();
    config.isolation = Isolation::ReadCommitted;
    let path = counterexample(config, END_STATE);
    assert!(path.contains(&Action::Consume(Topic::Succeeded, false)));
}

#[test]
fn with_refund_discrepancies_keyed_per_trade_a_second_failed_refund_is_told_to_nobody() {
    let mut config = Config::spec();
    config.world.paid_after_close = true;
    config.persons = 1;
    config.world.inflight = 1;
    let path = counterexample(config, END_STATE);
    assert!(path.contains(&Action::StartRefund(0, Some(Kind::RefundFailed))));
}

//! Example workflows, and [`registry`]: the one list of workflows that the dev server
//! and the Lambda functions share. This is the crate a user edits.
//!
//! - [`order`](order::order) — create an order, wait for the payment provider's webhook
//!   on a callback, ship or fail.
//! - [`report`](report::report) — fetch an issue, search the knowledge base, store a
//!   Markdown report as an artifact, and notify the team by an idempotent HTTP POST (a
//!   real side effect that a crash never repeats).
//! - [`approval`](approval::approval) — plan a change, wait up to three days for a
//!   human decision, then execute the plan step by step or park the run on rejection.
//! - [`agent`](agent::agent_with) — a support agent: looks the customer's order up,
//!   asks for a refund that waits for a person's approval, answers; its model's words
//!   streamed on `tokens`. A built-in fake model unless an OpenAI-compatible endpoint
//!   is configured.
//! - [`chain`](chain::chain) — `N` sequential steps, step `i` returning `i`, the sum as
//!   output: the shape benchmarks use.
//! - [`ticker`](ticker::ticker) — publish `N` stamped chunks on the stream `ticks`: the
//!   shape of `siesta bench --streams N`.
//! - [`per_customer`](per_customer::per_customer) — one conversation per customer at a
//!   time: a concurrency limit keyed by the input's `customer` queues a second start
//!   until the first run (which waits for the event `done`) finishes.
//! - [`limited`](limited::limited) — steps that report each attempt to a recorder,
//!   under a run limit per key and a step limit: the shape of `scripts/crash-limits`.
//! - [`timer`](timer::timer) — sleep on one durable timer until an instant (RFC 3339) or
//!   for `sleep_ms`: the shape of `siesta bench --timers N`.
//!
//! And one schedule, [`nightly_report`]: `report` every night at 02:00 UTC.

pub mod agent;
pub mod approval;
pub mod chain;
pub mod limited;
pub mod order;
pub mod per_customer;
pub mod report;
pub mod ticker;
pub mod timer;

use siesta::prelude::*;

pub use agent::{AgentInput, SupportDemoModel, agent_with, configured_model};
pub use approval::{ApprovalInput, ApprovalOutcome, Decision, ExecutedStep, approval};
pub use chain::chain;
pub use limited::{LimitedInput, limited, limited_runs};
pub use order::{OrderInput, OrderOutcome, PaymentEvent, order};
pub use per_customer::{PerCustomerInput, PerCustomerOutcome, per_customer, per_customer_limit};
pub use report::{
    Notice, Notification, NotifyTargets, ReportInput, ReportOutcome, report, report_with,
};
pub use ticker::{TickerInput, ticker};
pub use timer::{TimerInput, TimerOutcome, timer};

/// Every workflow this deployment runs, by name.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register("order", order);
    // A malformed SIESTA_NOTIFY_TARGETS is a deployment error: it fails every report
    // run with its message rather than quietly posting nowhere.
    match NotifyTargets::from_env() {
        Ok(targets) => registry.register("report", report_with(targets)),
        Err(e) => registry.register("report", move |_: Context, _: ReportInput| {
            let e = e.clone();
            async move { Err::<ReportOutcome, _>(Error::msg(e)) }
        }),
    };
    registry.register("approval", approval);
    registry.register("agent", agent_with(configured_model()));
    registry.register("chain", chain);
    registry.register("timer", timer);
    registry.register("ticker", ticker);
    // A declaration in code, checked when registered: one that does not hold (a bad
    // pattern, its workflow gone) stops the app at start-up, as a compile error would.
    if let Err(e) = registry.schedule(nightly_report()) {
        panic!("the nightly-report schedule: {e}");
    }
    registry
        .register("per_customer", per_customer)
        .limit(per_customer_limit())
        .register("limited", limited)
        .limit(limited_runs());
    registry
}

/// The schedule `nightly-report`: the `report` workflow every night at 02:00 UTC, on
/// the day's digest. A night missed while nothing served runs once when the server is
/// back (catch-up `latest`); a night whose previous report still runs is skipped.
pub fn nightly_report() -> Schedule {
    Schedule::new("nightly-report", "report", "0 2 * * *")
        .timezone("UTC")
        .input(serde_json::json!({"issue": "nightly digest"}))
        .overlap(Overlap::Skip)
        .catch_up(CatchUp::Latest)
}

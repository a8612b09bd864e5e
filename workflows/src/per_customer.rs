//! The `per_customer` workflow: one conversation per customer at a time. Its runs
//! count against the concurrency limit [`PER_CUSTOMER_LIMIT`] keyed by the input's
//! `customer`, at most one unfinished run per customer: a second start for a customer
//! is accepted and `queued` until the first finishes (docs/flow-control.md).
//!
//! Input: `{"customer": "acme"}`. The run waits for the event `done` (any JSON), then
//! completes with `{"customer": …, "done": <the event's value>}`.

use siesta::prelude::*;

/// The concurrency limit on `per_customer`'s runs.
pub const PER_CUSTOMER_LIMIT: &str = "per-customer";

/// What a run of `per_customer` is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerCustomerInput {
    /// The customer; at most one unfinished run per customer.
    pub customer: String,
}

/// What a finished `per_customer` run reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerCustomerOutcome {
    /// The customer it served.
    pub customer: String,
    /// The value of the `done` event that ended it.
    pub done: serde_json::Value,
}

/// Wait for `done`, then complete.
pub async fn per_customer(
    ctx: Context,
    input: PerCustomerInput,
) -> Result<PerCustomerOutcome, Error> {
    let done: serde_json::Value = ctx.wait_for_event("done").await?;
    Ok(PerCustomerOutcome {
        customer: input.customer,
        done,
    })
}

/// The limit `per_customer` runs under: one unfinished run per customer.
pub fn per_customer_limit() -> RunLimit {
    RunLimit::new(PER_CUSTOMER_LIMIT, 1)
        .key_from_input("/customer")
        .workflow("per_customer")
}

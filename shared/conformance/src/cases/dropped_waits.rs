//! A wait a combinator or a batch dropped never takes a delivery, whatever its shape
//! (vercel/workflow#4264): the product of combinator × wait kind × construction ×
//! arrival × replay cache, on the backend.
//!
//! The wait kinds: an event, an event in a child context, a callback, `wait_for_callback`,
//! messages (drained by a step after an event), a condition and a child run.
//!
//! Each case is a run of three rounds; a round races a wait against a timer, the timer
//! first in order (it wins when both are ready). The first round's timer is short and
//! wins: its wait is dropped. The test then sends deliveries, each to the wait live at
//! that moment, until the run completes; the run must complete with the later rounds
//! holding the deliveries sent after the first round lost, and no delivery may be
//! journaled as taken by an operation of the first round.
//!
//! Cases with the same replay cache and arrival run side by side, in lockstep, so the
//! whole product costs a few timer lengths of real time on a backend with the system
//! clock.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use siesta::context::{BatchOutcome, CompletionConfig, ConditionCheck, WaitStrategy, branch};
use siesta::*;

use crate::Harness;

/// The first round's timer (real time on a backend with the system clock), and a
/// condition's interval between checks.
const TICK: Duration = Duration::from_secs(1);

/// The later rounds' timers: they never fire while a case runs.
const LONG: Duration = Duration::from_secs(3600);

const COMBINATORS: [&str; 5] = ["race", "select_ok", "try_join_all", "parallel", "map"];
const KINDS: [&str; 7] = [
    "event",
    "event in a child context",
    "callback",
    "wait_for_callback",
    "message",
    "condition",
    "child",
];
/// Whether the first delivery arrives as the first round's timer falls due (before
/// the wake-up that decides it), in a later wake-up, or in a later wake-up of a new
/// engine (a process restarted: no replay cache).
const ARRIVALS: [&str; 3] = ["same wake-up", "later", "after restart"];

/// One case: what the workflow races, and how it builds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Case {
    combinator: String,
    kind: String,
    /// The wait is built inside the future (its position minted when first polled)
    /// rather than before the combinator.
    lazy: bool,
    /// Names the case's condition releases.
    key: String,
}

type Durable<T> = BoxFuture<'static, Result<T, Error>>;

fn boxed<T: Send + 'static>(
    f: impl std::future::Future<Output = Result<T, Error>> + Send + 'static,
) -> Durable<T> {
    Box::pin(f)
}

/// The values a case's condition has been released with, in order.
fn releases() -> &'static Mutex<HashMap<String, Vec<String>>> {
    static RELEASES: OnceLock<Mutex<HashMap<String, Vec<String>>>> = OnceLock::new();
    RELEASES.get_or_init(Mutex::default)
}

fn released(key: &str, n: usize) -> Option<String> {
    let all = releases().lock().unwrap_or_else(|e| e.into_inner());
    all.get(key).and_then(|v| v.get(n)).cloned()
}

/// The wait of `kind`, its operations minted now; `needed` is how many values the run
/// has taken before (the condition holds once it has been released once more).
fn wait_now(ctx: &Context, case: &Case, needed: usize) -> Durable<Option<String>> {
    match case.kind.as_str() {
        "event" => {
            let w = ctx.wait_for_event_unchecked::<String>("msg");
            boxed(async move { w.await.map(Some) })
        }
        "event in a child context" => {
            // `run_in_child_context` mints when first polled, whatever the case says.
            let c = ctx.clone();
            boxed(async move {
                c.run_in_child_context("scope", |c| async move {
                    c.wait_for_event_unchecked::<String>("msg").await.map(Some)
                })
                .await
            })
        }
        "callback" => {
            let cb = ctx.create_callback_unchecked::<String>("cb");
            boxed(async move { cb.await?.wait().await.map(Some) })
        }
        "wait_for_callback" => {
            let w =
                ctx.wait_for_callback_unchecked::<String, _, _>("wfc", |_, _, _| async { Ok(()) });
            boxed(async move { w.await.map(Some) })
        }
        "message" => {
            let nudge = ctx.wait_for_event_unchecked::<bool>("nudge");
            let c = ctx.clone();
            boxed(async move {
                nudge.await?;
                c.step("read", |_| async { Ok(()) }).await?;
                let got: Vec<String> = c.messages()?;
                Ok(Some(got.join(",")))
            })
        }
        "condition" => {
            let key = case.key.clone();
            let w = ctx
                .wait_for_condition(
                    "cond",
                    (needed, String::new()),
                    move |(needed, _): (usize, String), _| async move {
                        Ok(match released(&key, needed) {
                            Some(value) => ConditionCheck::Done((needed, value)),
                            None => ConditionCheck::Continue((needed, String::new())),
                        })
                    },
                )
                .strategy(WaitStrategy {
                    initial_delay: TICK,
                    max_delay: TICK,
                    multiplier: 1.0,
                    max_attempts: 100_000,
                });
            boxed(async move { w.await.map(|(_, value)| Some(value)) })
        }
        "child" => {
            let w = ctx.invoke::<String, _>("child", "matrix_child", json!(null));
            boxed(async move { w.await.map(Some) })
        }
        other => unreachable!("no wait kind {other}"),
    }
}

/// The case's wait, built now or when first polled.
fn the_wait(ctx: &Context, case: &Case, needed: usize) -> Durable<Option<String>> {
    if case.lazy {
        let (c, case) = (ctx.clone(), case.clone());
        boxed(async move { wait_now(&c, &case, needed).await })
    } else {
        wait_now(ctx, case, needed)
    }
}

/// The round's timer: `None` when it fires (`fails` makes that an error, for
/// `try_join_all`).
fn timer(ctx: &Context, case: &Case, d: Duration, fails: bool) -> Durable<Option<String>> {
    let fire = move |t: Durable<()>| {
        boxed(async move {
            t.await?;
            if fails {
                Err(Error::new(ErrorKind::StepFailed, "timed out", None))
            } else {
                Ok(None)
            }
        })
    };
    if case.lazy {
        let c = ctx.clone();
        fire(boxed(async move { c.wait("nap", d).await }))
    } else {
        fire(ctx.wait("nap", d).into_future())
    }
}

/// One round: `Some(value)` when the wait won, `None` when the timer did.
async fn round(ctx: &Context, case: &Case, i: u32, needed: usize) -> Result<Option<String>, Error> {
    let d = if i == 0 { TICK } else { LONG };
    match case.combinator.as_str() {
        "race" => {
            let futures = [timer(ctx, case, d, false), the_wait(ctx, case, needed)];
            ctx.race("r", futures).await
        }
        "select_ok" => {
            let futures = [timer(ctx, case, d, false), the_wait(ctx, case, needed)];
            ctx.select_ok("r", futures).await
        }
        "try_join_all" => {
            // The first round's timer fails the join, dropping the wait; a later round
            // has the wait alone (a join waits for every future).
            let mut futures = Vec::new();
            if i == 0 {
                futures.push(timer(ctx, case, d, true));
            }
            futures.push(the_wait(ctx, case, needed));
            match ctx.try_join_all("r", futures).await {
                Ok(values) => Ok(values.into_iter().flatten().last()),
                Err(e) if e.kind() == ErrorKind::CombinatorFailed => Ok(None),
                Err(e) => Err(e),
            }
        }
        "parallel" | "map" => {
            let batch = if case.combinator == "parallel" {
                let (a, b) = (case.clone(), case.clone());
                ctx.parallel(
                    "r",
                    vec![
                        branch(move |c: Context| timer(&c, &a, d, false)),
                        branch(move |c: Context| the_wait(&c, &b, needed)),
                    ],
                )
            } else {
                let case = case.clone();
                ctx.map("r", vec![0, 1], move |c: Context, item: u32, _| {
                    if item == 0 {
                        timer(&c, &case, d, false)
                    } else {
                        the_wait(&c, &case, needed)
                    }
                })
            };
            let done = batch
                .completion(CompletionConfig::first_successful())
                .await?;
            Ok(done
                .items
                .into_iter()
                .find_map(|item| match item.outcome {
                    BatchOutcome::Succeeded(v) => Some(v),
                    _ => None,
                })
                .flatten())
        }
        other => unreachable!("no combinator {other}"),
    }
}

fn matrix() -> Registry {
    let mut reg = Registry::new();
    reg.register("matrix", |ctx: Context, case: Case| async move {
        let (mut got, mut timeouts) = (Vec::<String>::new(), 0u32);
        for i in 0..3 {
            match round(&ctx, &case, i, got.len()).await? {
                Some(value) => got.push(value),
                None => timeouts += 1,
            }
        }
        Ok(json!({"got": got, "timeouts": timeouts}))
    });
    reg.register("matrix_child", |ctx: Context, _: Value| async move {
        ctx.wait_for_event_unchecked::<String>("go").await
    });
    reg
}

/// The round a position belongs to: the first occurrence number in it (`cb#1`,
/// `r#1/branch#1/cb#0`, `wfc#1/...`).
fn round_of(position: &Position) -> u32 {
    position
        .0
        .split('/')
        .next()
        .and_then(|first| first.rsplit_once('#'))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Whether `entry` is the first round's wait or under it (a batch's round whole).
fn in_lost_round(case: &Case, entry: &JournalEntry) -> bool {
    let p = &entry.position.0;
    if matches!(case.combinator.as_str(), "parallel" | "map") {
        return p.starts_with("r#0/");
    }
    let wait = match case.kind.as_str() {
        "event" => "msg",
        "event in a child context" => "scope",
        "callback" => "cb",
        "wait_for_callback" => "wfc",
        "message" => "nudge",
        "condition" => "cond",
        _ => "child",
    };
    *p == format!("{wait}#0") || p.starts_with(&format!("{wait}#0/"))
}

/// One case's run, and the values sent to it so far.
struct Running {
    case: Case,
    name: String,
    run: RunId,
    sent: Vec<String>,
    /// What went wrong, once something did.
    failure: Option<String>,
}

/// Send the case's next delivery to the wait live now; a refusal is the case's failure.
async fn deliver(h: &Harness, engine: &Engine, tenant: &TenantId, r: &mut Running) {
    if r.failure.is_none()
        && let Err(e) = try_deliver(h, engine, tenant, r).await
    {
        r.failure = Some(format!(
            "{}: delivery {} refused: {e}",
            r.name,
            r.sent.len()
        ));
    }
}

async fn try_deliver(
    h: &Harness,
    engine: &Engine,
    tenant: &TenantId,
    r: &mut Running,
) -> Result<(), String> {
    let value = format!("d{}", r.sent.len());
    let history = h
        .backend
        .store
        .load_replay_input(tenant, &r.run)
        .await
        .expect("read the history");
    // The open callback or child run created last: the wait live now.
    let live = |kind: OperationKind| {
        history
            .journal
            .iter()
            .filter(|e| e.kind == kind && matches!(e.state, EntryState::Waiting(_)))
            .filter_map(|e| e.handle.clone().map(|h| (round_of(&e.position), h)))
            .max()
            .map(|(_, handle)| handle)
    };
    match r.case.kind.as_str() {
        "event" | "event in a child context" => {
            engine
                .deliver_event(tenant, &r.run, "msg", json!(value), None)
                .await
                .map_err(|e| e.to_string())?;
        }
        "callback" | "wait_for_callback" => {
            let id = live(OperationKind::Callback).ok_or("no open callback")?;
            engine
                .complete_callback(&CallbackId(id), Some(tenant), Ok(json!(value)), None)
                .await
                .map_err(|e| e.to_string())?;
        }
        "message" => {
            engine
                .inject_message(tenant, &r.run, json!(value), None)
                .await
                .map_err(|e| e.to_string())?;
            engine
                .deliver_event(tenant, &r.run, "nudge", json!(true), None)
                .await
                .map_err(|e| e.to_string())?;
        }
        "condition" => {
            releases()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(r.case.key.clone())
                .or_default()
                .push(value.clone());
        }
        "child" => {
            let child = live(OperationKind::Invoke).ok_or("no child run waiting")?;
            engine
                .deliver_event(tenant, &RunId(child), "go", json!(value), None)
                .await
                .map_err(|e| e.to_string())?;
        }
        other => unreachable!("no wait kind {other}"),
    }
    r.sent.push(value);
    Ok(())
}

fn engine(h: &Harness, cache: bool) -> Engine {
    let mut config = EngineConfig {
        owner: format!("conformance-{}", uuid::Uuid::new_v4()),
        ..EngineConfig::default()
    };
    if !cache {
        config.replay_cache_entries = 0;
    }
    Engine::new(h.backend.clone(), h.clock.clone(), matrix(), config)
}

/// Every wait kind, built eagerly or lazily, dropped by every combinator and batch,
/// takes none of the deliveries sent after it lost — sent as it loses, later, or after
/// a restart; with the replay cache on and off. The run completes with the later
/// rounds holding them, in order, and no operation of the lost round took one.
pub async fn a_dropped_wait_takes_no_delivery_whatever_its_shape_and_whenever_it_arrives(
    h: Harness,
) {
    let (mut failures, mut total) = (Vec::new(), 0);
    for cache in [true, false] {
        for arrival in ARRIVALS {
            let tenant = TenantId(format!("conformance-{}", uuid::Uuid::new_v4()));
            let mut engine = engine(&h, cache);
            let mut runs = Vec::new();
            for combinator in COMBINATORS {
                for kind in KINDS {
                    for lazy in [false, true] {
                        let case = Case {
                            combinator: combinator.to_owned(),
                            kind: kind.to_owned(),
                            lazy,
                            key: uuid::Uuid::new_v4().to_string(),
                        };
                        let name = format!(
                            "{combinator} × {kind} × {} × {arrival} × cache {}",
                            if lazy { "lazy" } else { "eager" },
                            if cache { "on" } else { "off" }
                        );
                        let run = engine
                            .start(&tenant, "matrix", json!(case), None)
                            .await
                            .expect("start");
                        runs.push(Running {
                            case,
                            name,
                            run: run.id,
                            sent: Vec::new(),
                            failure: None,
                        });
                    }
                }
            }
            engine.run_until_idle(1000).await.expect("work the queue");
            if arrival == "same wake-up" {
                // The first round's timer falls due, and before the wake-up that
                // decides the round, a delivery for its wait arrives.
                h.advance(TICK).await;
                for r in &mut runs {
                    deliver(&h, &engine, &tenant, r).await;
                }
            } else {
                h.advance(TICK).await;
                engine.run_until_idle(1000).await.expect("work the queue");
                if arrival == "after restart" {
                    engine = self::engine(&h, cache);
                }
                for r in &mut runs {
                    deliver(&h, &engine, &tenant, r).await;
                }
            }
            // Then one delivery at a time to each unfinished run's live wait (a
            // condition's next check is a tick away), until every run finishes.
            for _ in 0..4 {
                if runs.iter().any(|r| r.case.kind == "condition") {
                    h.advance(TICK).await;
                }
                engine.run_until_idle(1000).await.expect("work the queue");
                let mut pending = false;
                for r in &mut runs {
                    let run = run_of(&h, &tenant, &r.run).await;
                    if !run.status.is_finished() && r.sent.len() < 4 {
                        pending = true;
                        deliver(&h, &engine, &tenant, r).await;
                    }
                }
                if !pending {
                    break;
                }
            }
            for r in &mut runs {
                if r.failure.is_none() {
                    r.failure = check(&h, &tenant, r).await.err();
                }
            }
            failures.extend(runs.into_iter().filter_map(|r| r.failure));
            total += COMBINATORS.len() * KINDS.len() * 2;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The run `id` as the store has it.
async fn run_of(h: &Harness, tenant: &TenantId, id: &RunId) -> Run {
    h.backend
        .store
        .get_run(tenant, id)
        .await
        .expect("read the run")
        .expect("the run exists")
}

/// The case's run completed with the deliveries sent after its first round lost, and
/// no operation of that round took one.
async fn check(h: &Harness, tenant: &TenantId, r: &Running) -> Result<(), String> {
    let name = &r.name;
    let run = run_of(h, tenant, &r.run).await;
    if run.status != RunStatus::Completed {
        return Err(format!(
            "{name}: {:?}, {:?}",
            run.status,
            run.error.map(|e| e.message)
        ));
    }
    let Some(Payload::Inline(output)) = run.output else {
        return Err(format!("{name}: an inline output, got {:?}", run.output));
    };
    let got: Vec<String> = serde_json::from_value(output["got"].clone()).expect("got");
    let timeouts = output["timeouts"].as_u64().expect("timeouts");
    let batch = matches!(r.case.combinator.as_str(), "parallel" | "map");
    let expected = if batch && timeouts == 0 {
        // A batch's branches that are ready together finish in either order: when the
        // delivery came with the first round's timer, it may win that round.
        (0, r.sent.clone())
    } else {
        (1, r.sent[r.sent.len().saturating_sub(2)..].to_vec())
    };
    if (timeouts, got.clone()) != expected {
        return Err(format!(
            "{name}: {output}, expected {expected:?} (sent {:?})",
            r.sent
        ));
    }
    let history = h
        .backend
        .store
        .load_replay_input(tenant, &r.run)
        .await
        .expect("read the history");
    if timeouts == 1 {
        // The later rounds' timers never fire: the first round is the one lost.
        for entry in history.journal.iter().filter(|e| in_lost_round(&r.case, e)) {
            if !entry.consumed.is_empty() {
                return Err(format!(
                    "{name}: {} of the lost round took {:?}",
                    entry.position, entry.consumed
                ));
            }
        }
    }
    let taken: Vec<&DeliveryId> = history
        .journal
        .iter()
        .flat_map(|e| e.consumed.iter())
        .collect();
    let mut unique = taken.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != taken.len() {
        return Err(format!("{name}: a delivery taken twice: {taken:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_belongs_to_the_round_of_its_first_occurrence() {
        assert_eq!(round_of(&Position("cb#1".into())), 1);
        assert_eq!(round_of(&Position("r#2/branch#1/cb#0".into())), 2);
        assert_eq!(round_of(&Position("wfc#0/wfc#0".into())), 0);
    }

    #[test]
    fn a_condition_holds_with_the_value_it_was_released_with() {
        releases()
            .lock()
            .unwrap()
            .insert("k".into(), vec!["a".into(), "b".into()]);
        assert_eq!(released("k", 1).as_deref(), Some("b"));
        assert_eq!(released("k", 2), None);
    }
}

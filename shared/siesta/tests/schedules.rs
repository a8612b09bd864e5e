//! Schedules on the harness's clock: ticks fire once, overlap and catch-up as
//! declared, pause and resume, a server down across ticks, daylight-saving changes.
//! No sleeps: the clock is set, the sweep runs.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

use chrono::DateTime;
use serde_json::json;
use siesta::ports::{RunFilter, ScheduleState};
use siesta::schedule::{tick_run_id, trigger_run_id};
use siesta::{
    CatchUp, Context, EngineError, Error, Overlap, Registry, RunId, RunStatus, Schedule,
    ScheduleError, Timestamp,
};
use siesta_testing::{TestEnv, default_engine_config};

const TENANT: &str = "default";

fn at(rfc3339: &str) -> Timestamp {
    Timestamp(
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis(),
    )
}

/// `quick` completes at once; `slow` waits for the event `done`.
fn workflows() -> Registry {
    let mut reg = Registry::new();
    reg.register("quick", |_: Context, input: serde_json::Value| async move {
        Ok::<_, Error>(input)
    });
    reg.register("slow", |ctx: Context, _: serde_json::Value| async move {
        let _: serde_json::Value = ctx.wait_for_event("done").await?;
        Ok::<_, Error>(())
    });
    reg
}

fn env_with(schedule: Schedule, start: &str) -> TestEnv {
    let mut reg = workflows();
    reg.schedule(schedule).unwrap();
    TestEnv::builder(reg)
        .tenant(TENANT)
        .start_at(at(start))
        .build()
}

/// Set the clock and let the sweep and the worker do what is due.
async fn at_time(env: &TestEnv, t: &str) {
    env.clock().set(at(t));
    env.run_until_idle().await;
}

/// The ids of the tenant's runs, oldest first.
async fn runs(env: &TestEnv) -> Vec<String> {
    let page = env
        .backend()
        .store
        .list_runs(env.tenant(), &RunFilter::default(), None, 1000)
        .await
        .unwrap();
    let mut ids: Vec<String> = page.runs.into_iter().map(|r| r.id.0).collect();
    ids.sort();
    ids
}

fn tick_id(name: &str, t: &str) -> String {
    tick_run_id(name, at(t)).0
}

async fn state(env: &TestEnv, name: &str) -> ScheduleState {
    env.backend()
        .schedules
        .get_schedule_state(env.tenant(), name)
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_tick_fires_once_with_the_schedules_input_and_a_run_named_after_it() {
    let env = env_with(
        Schedule::new("nightly", "quick", "0 2 * * *").input(json!({"n": 1})),
        "2026-01-01T00:00:00Z",
    );
    at_time(&env, "2026-01-01T01:00:00Z").await;
    assert!(runs(&env).await.is_empty(), "not due yet");
    at_time(&env, "2026-01-01T02:00:30Z").await;
    let id = RunId(tick_id("nightly", "2026-01-01T02:00:00Z"));
    assert_eq!(runs(&env).await, std::slice::from_ref(&id.0));
    assert_eq!(env.status(&id).await, RunStatus::Completed);
    assert_eq!(env.output::<serde_json::Value>(&id).await, json!({"n": 1}));
    at_time(&env, "2026-01-01T02:04:00Z").await;
    assert_eq!(runs(&env).await.len(), 1, "the tick fired once");
    at_time(&env, "2026-01-02T02:00:00Z").await;
    assert_eq!(runs(&env).await.len(), 2, "the next day's tick");
}

#[tokio::test]
async fn two_sweeps_at_the_same_tick_start_one_run() {
    let env = env_with(
        Schedule::new("nightly", "quick", "0 2 * * *").overlap(Overlap::Allow),
        "2026-01-01T00:00:00Z",
    );
    env.run_until_idle().await;
    env.clock().set(at("2026-01-01T02:00:10Z"));
    let (other, _) = env.another_engine("other");
    let engine = env.engine();
    let (a, b) = tokio::join!(engine.sweep(100), other.sweep(100));
    let started = a.unwrap().scheduled + b.unwrap().scheduled;
    assert!(started >= 1, "{started}");
    env.run_until_idle().await;
    assert_eq!(
        runs(&env).await,
        [tick_id("nightly", "2026-01-01T02:00:00Z")]
    );
}

#[tokio::test]
async fn a_tick_started_by_a_sweep_that_died_before_writing_the_state_is_not_started_again() {
    let env = env_with(
        Schedule::new("nightly", "slow", "0 2 * * *"),
        "2026-01-01T00:00:00Z",
    );
    env.run_until_idle().await;
    env.clock().set(at("2026-01-01T02:00:10Z"));
    // What the dead sweep did: the tick's run, and no state written.
    let id = RunId(tick_id("nightly", "2026-01-01T02:00:00Z"));
    env.create("slow", json!(null), Some(id.clone()))
        .await
        .unwrap();
    env.run_until_idle().await;
    assert_eq!(runs(&env).await, std::slice::from_ref(&id.0));
    assert_eq!(
        state(&env, "nightly").await.last_fired,
        Some(at("2026-01-01T02:00:00Z")),
        "recorded as the tick's run"
    );
}

#[tokio::test]
async fn a_new_schedule_does_not_fire_the_ticks_before_it_was_first_seen() {
    let env = env_with(
        Schedule::new("nightly", "quick", "0 2 * * *"),
        "2026-01-01T12:00:00Z",
    );
    env.run_until_idle().await;
    assert!(runs(&env).await.is_empty());
    at_time(&env, "2026-01-02T02:00:00Z").await;
    assert_eq!(
        runs(&env).await,
        [tick_id("nightly", "2026-01-02T02:00:00Z")]
    );
}

#[tokio::test]
async fn a_paused_schedule_fires_nothing_and_resumed_goes_on_from_its_next_tick_without_the_paused_ones()
 {
    let env = env_with(
        Schedule::new("hourly", "quick", "0 * * * *").catch_up(CatchUp::All { max: 10 }),
        "2026-01-01T00:30:00Z",
    );
    env.run_until_idle().await;
    let tenant = env.tenant().clone();
    let paused = env
        .engine()
        .pause_schedule(&tenant, "hourly")
        .await
        .unwrap();
    assert!(paused.paused);
    assert_eq!(paused.next, None, "no next tick while paused");
    at_time(&env, "2026-01-01T01:00:00Z").await;
    at_time(&env, "2026-01-01T03:10:00Z").await;
    assert!(runs(&env).await.is_empty(), "paused: 1, 2 and 3 o'clock");
    let resumed = env
        .engine()
        .resume_schedule(&tenant, "hourly")
        .await
        .unwrap();
    assert!(!resumed.paused);
    assert_eq!(resumed.next, Some(at("2026-01-01T04:00:00Z")));
    env.run_until_idle().await;
    assert!(
        runs(&env).await.is_empty(),
        "the paused ticks are not caught up"
    );
    at_time(&env, "2026-01-01T04:00:00Z").await;
    assert_eq!(
        runs(&env).await,
        [tick_id("hourly", "2026-01-01T04:00:00Z")]
    );
}

#[tokio::test]
async fn overlap_skip_drops_a_tick_while_the_previous_run_is_unfinished() {
    let env = env_with(
        Schedule::new("hourly", "slow", "0 * * * *").overlap(Overlap::Skip),
        "2026-01-01T00:30:00Z",
    );
    env.run_until_idle().await;
    at_time(&env, "2026-01-01T01:00:00Z").await;
    at_time(&env, "2026-01-01T02:00:00Z").await;
    let first = RunId(tick_id("hourly", "2026-01-01T01:00:00Z"));
    assert_eq!(
        runs(&env).await,
        std::slice::from_ref(&first.0),
        "2 o'clock skipped"
    );
    env.deliver_event(&first, "done", json!(true)).await;
    env.run_until_idle().await;
    at_time(&env, "2026-01-01T03:00:00Z").await;
    assert_eq!(
        runs(&env).await,
        [first.0, tick_id("hourly", "2026-01-01T03:00:00Z")],
        "3 o'clock fires: the previous run finished; 2 o'clock stays skipped"
    );
}

#[tokio::test]
async fn overlap_allow_starts_every_tick_while_the_previous_run_is_unfinished() {
    let env = env_with(
        Schedule::new("hourly", "slow", "0 * * * *").overlap(Overlap::Allow),
        "2026-01-01T00:30:00Z",
    );
    env.run_until_idle().await;
    at_time(&env, "2026-01-01T01:00:00Z").await;
    at_time(&env, "2026-01-01T02:00:00Z").await;
    at_time(&env, "2026-01-01T03:00:00Z").await;
    assert_eq!(
        runs(&env).await,
        [
            tick_id("hourly", "2026-01-01T01:00:00Z"),
            tick_id("hourly", "2026-01-01T02:00:00Z"),
            tick_id("hourly", "2026-01-01T03:00:00Z")
        ]
    );
}

#[tokio::test]
async fn overlap_buffer_one_starts_one_waiting_tick_when_the_previous_run_finishes() {
    let env = env_with(
        Schedule::new("hourly", "slow", "0 * * * *").overlap(Overlap::BufferOne),
        "2026-01-01T00:30:00Z",
    );
    env.run_until_idle().await;
    at_time(&env, "2026-01-01T01:00:00Z").await;
    at_time(&env, "2026-01-01T02:00:00Z").await;
    at_time(&env, "2026-01-01T03:00:00Z").await;
    let first = RunId(tick_id("hourly", "2026-01-01T01:00:00Z"));
    assert_eq!(runs(&env).await, std::slice::from_ref(&first.0));
    assert_eq!(
        state(&env, "hourly").await.buffered,
        Some(at("2026-01-01T02:00:00Z")),
        "2 o'clock waits; 3 o'clock is dropped"
    );
    env.deliver_event(&first, "done", json!(true)).await;
    at_time(&env, "2026-01-01T03:20:00Z").await;
    assert_eq!(
        runs(&env).await,
        [first.0, tick_id("hourly", "2026-01-01T02:00:00Z")],
        "the buffered tick starts at the first sweep after the run finished"
    );
    assert_eq!(state(&env, "hourly").await.buffered, None);
}

/// The server serves until 01:00 on day 1, is down for three nightly ticks (days 1, 2
/// and 3 at 02:00), and a new process comes back at noon on day 3.
async fn down_across_three_ticks(catch_up: CatchUp) -> Vec<String> {
    let env = env_with(
        Schedule::new("nightly", "quick", "0 2 * * *")
            .overlap(Overlap::Allow)
            .catch_up(catch_up),
        "2026-01-01T00:00:00Z",
    );
    at_time(&env, "2026-01-01T01:00:00Z").await;
    env.clock().set(at("2026-01-03T12:00:00Z"));
    env.restart();
    env.run_until_idle().await;
    runs(&env).await
}

#[tokio::test]
async fn after_a_server_down_across_three_ticks_catch_up_latest_runs_the_last_one() {
    assert_eq!(
        down_across_three_ticks(CatchUp::Latest).await,
        [tick_id("nightly", "2026-01-03T02:00:00Z")]
    );
}

#[tokio::test]
async fn after_a_server_down_across_three_ticks_catch_up_all_runs_each_up_to_its_bound() {
    assert_eq!(
        down_across_three_ticks(CatchUp::All { max: 10 }).await,
        [
            tick_id("nightly", "2026-01-01T02:00:00Z"),
            tick_id("nightly", "2026-01-02T02:00:00Z"),
            tick_id("nightly", "2026-01-03T02:00:00Z")
        ]
    );
    assert_eq!(
        down_across_three_ticks(CatchUp::All { max: 2 }).await,
        [
            tick_id("nightly", "2026-01-02T02:00:00Z"),
            tick_id("nightly", "2026-01-03T02:00:00Z")
        ]
    );
}

#[tokio::test]
async fn after_a_server_down_across_three_ticks_catch_up_skip_runs_none_of_them() {
    assert!(down_across_three_ticks(CatchUp::Skip).await.is_empty());
}

#[tokio::test]
async fn a_server_back_within_grace_of_a_tick_fires_it_on_time_under_catch_up_skip() {
    let env = env_with(
        Schedule::new("nightly", "quick", "0 2 * * *").catch_up(CatchUp::Skip),
        "2026-01-01T00:00:00Z",
    );
    env.run_until_idle().await;
    env.clock().set(at("2026-01-03T02:03:00Z"));
    env.restart();
    env.run_until_idle().await;
    assert_eq!(
        runs(&env).await,
        [tick_id("nightly", "2026-01-03T02:00:00Z")]
    );
}

#[tokio::test]
async fn in_paris_the_spring_gap_tick_fires_when_the_gap_ends_and_the_autumn_repeat_fires_once() {
    let mut reg = workflows();
    reg.schedule(
        Schedule::new("gap", "quick", "30 2 * * *")
            .timezone("Europe/Paris")
            .tenant(TENANT),
    )
    .unwrap();
    let env = TestEnv::builder(reg)
        .tenant(TENANT)
        .start_at(at("2026-03-28T12:00:00Z"))
        .build();
    env.run_until_idle().await;
    // 2026-03-29, Paris: 02:00 CET becomes 03:00 CEST (01:00 UTC); 02:30 is never shown.
    at_time(&env, "2026-03-29T00:59:00Z").await;
    assert!(runs(&env).await.is_empty());
    at_time(&env, "2026-03-29T01:00:00Z").await;
    assert_eq!(runs(&env).await, [tick_id("gap", "2026-03-29T01:00:00Z")]);
    // Every minute of the autumn change's night, 2026-10-25: 02:30 is shown at 00:30
    // UTC (summer time) and again at 01:30 UTC (winter time); it fires the first time.
    at_time(&env, "2026-10-24T12:00:00Z").await;
    let before = runs(&env).await.len();
    let mut t = at("2026-10-25T00:00:00Z");
    while t < at("2026-10-25T03:00:00Z") {
        env.clock().set(t);
        env.run_until_idle().await;
        t = Timestamp(t.millis() + 60_000);
    }
    let now = runs(&env).await;
    assert_eq!(now.len(), before + 1, "{now:?}");
    assert!(
        now.contains(&tick_id("gap", "2026-10-25T00:30:00Z")),
        "{now:?}"
    );
}

#[tokio::test]
async fn a_schedule_disabled_on_the_deployment_fires_nothing_and_is_listed_paused() {
    let mut reg = workflows();
    reg.schedule(Schedule::new("nightly", "quick", "0 2 * * *"))
        .unwrap();
    let mut config = default_engine_config();
    config.disabled_schedules = siesta::parse_schedule_names("nightly, other");
    let env = TestEnv::builder(reg)
        .tenant(TENANT)
        .start_at(at("2026-01-01T00:00:00Z"))
        .engine_config(config)
        .build();
    at_time(&env, "2026-01-01T02:00:00Z").await;
    assert!(runs(&env).await.is_empty());
    let listed = env.engine().schedules(env.tenant()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].paused && listed[0].disabled);
    assert_eq!(listed[0].next, None);
    // Still triggered by hand.
    let (run, created) = env
        .engine()
        .trigger_schedule(env.tenant(), "nightly", Some("by-hand"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(run.workflow, "quick");
}

#[tokio::test]
async fn trigger_now_starts_a_run_and_a_retry_with_the_same_key_answers_it() {
    let env = env_with(
        Schedule::new("nightly", "slow", "0 2 * * *"),
        "2026-01-01T00:00:00Z",
    );
    let engine = env.engine();
    let tenant = env.tenant().clone();
    let (run, created) = engine
        .trigger_schedule(&tenant, "nightly", Some("req-1"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(run.id, trigger_run_id("nightly", Some("req-1"), env.now()));
    let (again, created) = engine
        .trigger_schedule(&tenant, "nightly", Some("req-1"))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.id, run.id);
    assert!(matches!(
        engine
            .trigger_schedule(&tenant, "nightly", Some("a/b"))
            .await,
        Err(EngineError::InvalidInput(_))
    ));
    env.run_until_idle().await;
    // Not a tick: the 02:00 tick fires though the triggered run is unfinished.
    at_time(&env, "2026-01-01T02:00:00Z").await;
    assert_eq!(runs(&env).await.len(), 2);
}

#[tokio::test]
async fn schedules_are_listed_and_acted_on_by_their_own_tenant_only() {
    let mut reg = workflows();
    reg.schedule(Schedule::new("mine", "quick", "0 2 * * *").tenant("acme"))
        .unwrap();
    reg.schedule(Schedule::new("theirs", "quick", "0 3 * * *").tenant("globex"))
        .unwrap();
    let env = TestEnv::builder(reg)
        .tenant("acme")
        .start_at(at("2026-01-01T00:00:00Z"))
        .build();
    env.run_until_idle().await;
    let engine = env.engine();
    let listed = engine.schedules(&"acme".into()).await.unwrap();
    assert_eq!(listed.len(), 1);
    let mine = &listed[0];
    assert_eq!(
        (
            mine.name.as_str(),
            mine.workflow.as_str(),
            mine.cron.as_str(),
            mine.timezone.as_str()
        ),
        ("mine", "quick", "0 2 * * *", "UTC")
    );
    assert_eq!(mine.next, Some(at("2026-01-01T02:00:00Z")));
    assert!(!mine.paused);
    assert!(matches!(
        engine.pause_schedule(&"acme".into(), "theirs").await,
        Err(EngineError::NotFound)
    ));
    assert!(matches!(
        engine
            .trigger_schedule(&"acme".into(), "theirs", None)
            .await,
        Err(EngineError::NotFound)
    ));
    // The other tenant's schedule fires into its own tenant.
    at_time(&env, "2026-01-01T03:00:00Z").await;
    let theirs = engine
        .get_run(
            &"globex".into(),
            &tick_run_id("theirs", at("2026-01-01T03:00:00Z")),
        )
        .await
        .unwrap();
    assert_eq!(theirs.tenant.as_str(), "globex");
}

#[test]
fn registration_refuses_an_unknown_workflow_an_invalid_input_and_a_second_schedule_of_a_name() {
    let mut reg = Registry::new();
    reg.register(
        "typed",
        |_: Context, n: u32| async move { Ok::<_, Error>(n) },
    );
    assert!(matches!(
        reg.schedule(Schedule::new("s", "nope", "0 2 * * *")),
        Err(ScheduleError::UnknownWorkflow { .. })
    ));
    assert!(matches!(
        reg.schedule(Schedule::new("s", "typed", "0 2 * * *").input(json!("x"))),
        Err(ScheduleError::InvalidInput { .. })
    ));
    reg.schedule(Schedule::new("s", "typed", "0 2 * * *").input(json!(3)))
        .unwrap();
    assert!(matches!(
        reg.schedule(Schedule::new("s", "typed", "0 3 * * *").input(json!(3))),
        Err(ScheduleError::Duplicate(_))
    ));
    let Err(e) = reg.schedule(Schedule::new("t", "typed", "0 2 * * *").timezone("Paris")) else {
        panic!("a zone that is not IANA's was accepted");
    };
    assert_eq!(
        e.to_string(),
        "unknown time zone 'Paris' (an IANA name such as 'UTC' or 'Europe/Paris')"
    );
}

#[tokio::test]
async fn a_tick_whose_start_is_refused_is_tried_again_by_the_next_sweep() {
    let mut reg = workflows();
    reg.schedule(Schedule::new("hourly", "quick", "0 * * * *"))
        .unwrap();
    let mut config = default_engine_config();
    config.quotas = siesta::Quotas::parse(r#"{"default": {"max_unfinished_runs": 1}}"#).unwrap();
    let env = TestEnv::builder(reg)
        .tenant(TENANT)
        .start_at(at("2026-01-01T00:30:00Z"))
        .engine_config(config)
        .build();
    let busy = env.start("slow", json!(null)).await;
    at_time(&env, "2026-01-01T01:00:00Z").await;
    assert_eq!(
        runs(&env).await,
        std::slice::from_ref(&busy.0),
        "over quota"
    );
    assert_eq!(state(&env, "hourly").await.last_fired, None);
    env.deliver_event(&busy, "done", json!(true)).await;
    at_time(&env, "2026-01-01T01:02:00Z").await;
    assert!(
        runs(&env)
            .await
            .contains(&tick_id("hourly", "2026-01-01T01:00:00Z")),
        "the 01:00 tick, still on time"
    );
}

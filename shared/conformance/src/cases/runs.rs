//! Creating and reading runs; tenants.

use siesta::ports::*;
use siesta::*;

use crate::Harness;
use crate::support::*;

/// `create_run` stores the run and its first event (`seq` 1); `get_run` returns it as
/// written; a second create with the same key is `AlreadyExists` and changes nothing; a
/// missing run is `None`.
pub async fn create_and_get_run(h: Harness) {
    let tenant = tenant();
    let run = new_run(&h, &tenant, "order");
    let first = started(&run);
    h.backend
        .store
        .create_run(&run, &first)
        .await
        .expect("create_run");

    assert_eq!(
        get(&h, &tenant, &run.id).await,
        run,
        "get_run returns the run as created"
    );
    assert_eq!(
        timeline(&h, &tenant, &run.id).await,
        vec![first.clone()],
        "the run's timeline is its first event"
    );

    let before = snapshot(&h, &tenant, &run.id).await;
    let mut again = run.clone();
    again.workflow = "other".into();
    let mut other_first = first.clone();
    other_first.event_type = EventType::ExecutionFailed;
    let second = h.backend.store.create_run(&again, &other_first).await;
    assert!(
        matches!(second, Err(StoreError::AlreadyExists)),
        "creating an existing run: expected AlreadyExists, got {second:?}"
    );
    assert_eq!(
        snapshot(&h, &tenant, &run.id).await,
        before,
        "a refused create changes nothing"
    );

    let missing = h
        .backend
        .store
        .get_run(&tenant, &run_id())
        .await
        .expect("get_run of a missing run");
    assert_eq!(missing, None, "a missing run is None");
}

/// Everything is keyed by tenant: another tenant does not see the run (get, claim,
/// deliver, replay input, timeline, listing, tool calls) and can use the same run id.
pub async fn tenant_isolation(h: Harness) {
    let owner = tenant();
    let stranger = tenant();
    let run = create(&h, &owner).await;
    let tool_call = running_tool_call(&h, &run, "charge#0");
    let mut cp = checkpoint_over(&h, &run, None, |_| {});
    cp.tool_calls.push(tool_call.clone());
    cp.journal
        .push(entry(&h, "step#0", 0, succeeded(serde_json::json!(1))));
    write(&h, &cp).await;
    deliver(&h, &event_delivery(&h, &cp.run, "approval")).await;
    let owners_view = snapshot(&h, &owner, &run.id).await;

    let store = &h.backend.store;
    assert_eq!(
        store.get_run(&stranger, &run.id).await.expect("get_run"),
        None,
        "another tenant's get_run"
    );
    let claimed = store
        .claim(&stranger, &run.id, &claim_for(&h, "thief", LEASE))
        .await;
    assert!(
        matches!(claimed, Err(StoreError::NotFound)),
        "another tenant's claim: expected NotFound, got {claimed:?}"
    );
    let mut foreign = event_delivery(&h, &run, "approval");
    foreign.tenant = stranger.clone();
    let delivered = store.deliver(&foreign).await;
    assert!(
        matches!(delivered, Err(StoreError::NotFound)),
        "another tenant's deliver: expected NotFound, got {delivered:?}"
    );
    let replay_input = store
        .load_replay_input(&stranger, &run.id)
        .await
        .expect("load_replay_input");
    assert!(
        replay_input.journal.is_empty() && replay_input.deliveries.is_empty(),
        "another tenant's replay input is empty, got {replay_input:?}"
    );
    assert_eq!(
        store
            .timeline(&stranger, &run.id, 0, 100)
            .await
            .expect("timeline"),
        vec![],
        "another tenant's timeline is empty"
    );
    let page = store
        .list_runs(&stranger, &RunFilter::default(), None, 100)
        .await
        .expect("list_runs");
    assert!(
        page.runs.is_empty(),
        "another tenant's listing is empty, got {:?}",
        page.runs.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    assert_eq!(
        store
            .get_tool_call(&stranger, &tool_call.key)
            .await
            .expect("get_tool_call"),
        None,
        "another tenant's get_tool_call"
    );

    // The same run id under another tenant is another run.
    let mut twin = new_run(&h, &stranger, "twin");
    twin.id = run.id.clone();
    create_run(&h, &twin).await;
    assert_eq!(get(&h, &stranger, &run.id).await, twin, "the twin run");
    assert_eq!(
        snapshot(&h, &owner, &run.id).await,
        owners_view,
        "the owner's run is untouched by the stranger's reads and writes"
    );
    let owners = store
        .list_runs(&owner, &RunFilter::default(), None, 100)
        .await
        .expect("list_runs");
    assert_eq!(
        owners.runs.iter().map(|r| &r.workflow).collect::<Vec<_>>(),
        vec!["conformance"],
        "the owner lists only its own run"
    );
}

/// A run started in a caller's trace keeps its `traceparent` through everything a run
/// goes through: the create, a claim, a delivery and a checkpoint, so every wake-up
/// joins that trace.
pub async fn a_run_keeps_its_trace_parent(h: Harness) {
    let tenant = tenant();
    let mut run = new_run(&h, &tenant, "order");
    let parent =
        telemetry::TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("a traceparent");
    run.trace_parent = Some(parent);
    create_run(&h, &run).await;
    assert_eq!(get(&h, &tenant, &run.id).await.trace_parent, Some(parent));

    let claimed = claim(&h, &run, "conformance", std::time::Duration::from_secs(60)).await;
    assert_eq!(claimed.trace_parent, Some(parent), "the claim's run");
    let cp = checkpoint_over(&h, &claimed, Some(claimed.epoch), |r| {
        r.status = RunStatus::Waiting;
        r.lease = None;
        r.due_at = Some(h.now().plus(std::time::Duration::from_secs(3600)));
    });
    write(&h, &cp).await;
    let waiting = cp.run;
    assert_eq!(get(&h, &tenant, &run.id).await.trace_parent, Some(parent));
    let delivered = deliver(&h, &event_delivery(&h, &waiting, "go")).await;
    assert_eq!(delivered.trace_parent, Some(parent), "the delivery's run");
    let done = finish(&h, &get(&h, &tenant, &run.id).await, RunStatus::Completed).await;
    assert_eq!(done.trace_parent, Some(parent));
    assert_eq!(
        get(&h, &tenant, &run.id).await.trace_parent,
        Some(parent),
        "after the last checkpoint"
    );
}

/// A paused run (an operator's control-plane write from waiting) is not due, cannot be
/// claimed, and takes a delivery — recorded, the run still paused and not due — so that
/// a resume finds it; a resume (the write back to pending, due now) makes it due again.
pub async fn a_paused_run_is_not_due_not_claimed_and_keeps_its_deliveries(h: Harness) {
    let tenant = tenant();
    let run = waiting_run(&h, &tenant).await;
    let pause = checkpoint_over(&h, &run, None, |r| {
        r.status = RunStatus::Paused;
        r.due_at = None;
        r.resend_after = None;
    });
    write(&h, &pause).await;
    let paused = pause.run;
    let far = h.now().plus(std::time::Duration::from_secs(86_400));
    let due = h.backend.store.due_runs(far, 10_000).await.unwrap();
    assert!(
        !due.iter().any(|d| d.run_id == run.id),
        "a paused run is not due"
    );
    let claimed = h
        .backend
        .store
        .claim(&tenant, &run.id, &claim_for(&h, "eager", LEASE))
        .await;
    assert!(
        matches!(claimed, Err(StoreError::Conflict(_))),
        "a paused run is not claimed: {claimed:?}"
    );
    let got = h
        .backend
        .store
        .deliver(&event_delivery(&h, &paused, "approval"))
        .await;
    assert!(
        matches!(got, Ok(DeliverOutcome::Accepted(_))),
        "a delivery to a paused run is stored: {got:?}"
    );
    let after = h
        .backend
        .store
        .get_run(&tenant, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.status, RunStatus::Paused);
    assert_eq!(after.inbox_seq, paused.inbox_seq + 1, "recorded");
    assert_eq!(after.due_at, None, "and not made due");

    let resume = checkpoint_over(&h, &after, None, |r| {
        r.status = RunStatus::Pending;
        r.due_at = Some(h.now());
    });
    write(&h, &resume).await;
    let due = h.backend.store.due_runs(far, 10_000).await.unwrap();
    assert!(due.iter().any(|d| d.run_id == run.id), "resumed, it is due");
}

//! Concurrency limits under racing writers, on DynamoDB Local: several processes on one
//! table start runs of one key at once, then finish the holders at once. The
//! conditions of the slots' writes decide who wins; a loser reads again and plans
//! again. No more than the max ever hold the key, the line keeps its tickets, and every
//! freed slot goes to the first in line.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed assertion"
)]

mod support;

use std::sync::Arc;

use serde_json::json;
use siesta::ports::{Checkpoint, RunStore};
use siesta::*;

const MAX: u32 = 3;
const RUNS: usize = 14;
const PROCESSES: usize = 4;

fn limited(tenant: &TenantId, n: usize) -> (Run, TimelineEvent) {
    let now = Timestamp(1_700_000_000_000 + n as i64);
    let mut run = Run::new(
        tenant.clone(),
        RunId(format!("race-{n:02}")),
        "limited",
        Payload::Inline(json!({ "customer": "acme" })),
        now,
    );
    run.timeline_seq = 1;
    run.due_at = Some(now);
    run.limits = vec![LimitSlot {
        limit: "per-customer".into(),
        key: "acme".into(),
        max: MAX,
    }];
    let mut started = TimelineEvent::execution_started(now, "limited", json!(null));
    started.seq = 1;
    (run, started)
}

/// The finishing checkpoint of `current`, as the control plane would write it.
fn finishing(current: &Run) -> Checkpoint {
    let mut run = current.clone();
    run.version += 1;
    run.updated_at = Timestamp(current.updated_at.0 + 1_000);
    run.status = RunStatus::Completed;
    (run.due_at, run.resend_after, run.queued) = (None, None, None);
    Checkpoint::new(run, current.version, None)
}

async fn holders(store: &dyn RunStore, tenant: &TenantId) -> (u64, u64) {
    let usage = store.limit_usage(tenant).await.unwrap();
    usage.first().map_or((0, 0), |u| (u.holders, u.waiters))
}

#[tokio::test]
async fn racing_starts_and_finishes_never_put_more_than_the_max_on_a_key() {
    let Some(env) = support::emulators().await else {
        return;
    };
    let names = env.names(3).await;
    let stores: Vec<Arc<dyn RunStore>> = (0..PROCESSES)
        .map(|_| {
            siesta_aws::AwsBackend::new(&env.sdk, names.clone())
                .backend()
                .store
        })
        .collect();
    let tenant = TenantId(format!("race-{}", uuid::Uuid::new_v4().simple()));

    // Every start at once, spread over the processes.
    let starts = (0..RUNS).map(|n| {
        let store = stores[n % PROCESSES].clone();
        let (run, started) = limited(&tenant, n);
        async move { store.admit_run(&run, &started, None).await }
    });
    let created: Vec<Run> = futures::future::try_join_all(starts).await.unwrap();
    let admitted: Vec<&Run> = created
        .iter()
        .filter(|r| r.status == RunStatus::Pending)
        .collect();
    assert_eq!(admitted.len(), MAX as usize, "exactly the max hold the key");
    let mut tickets: Vec<u64> = created
        .iter()
        .filter_map(|r| r.queued.as_ref().map(|q| q.ticket))
        .collect();
    tickets.sort_unstable();
    assert_eq!(
        tickets,
        (1..=(RUNS as u64 - u64::from(MAX))).collect::<Vec<_>>(),
        "one ticket each, none skipped"
    );
    assert_eq!(
        holders(&*stores[0], &tenant).await,
        (u64::from(MAX), (RUNS as u64) - u64::from(MAX))
    );
    let by_ticket = |ticket: u64| {
        created
            .iter()
            .find(|r| r.queued.as_ref().is_some_and(|q| q.ticket == ticket))
            .map(|r| r.id.clone())
            .unwrap()
    };

    // Rounds: every holder finished at once, through different processes; each
    // finish hands its slot to the first in line.
    let mut next_ticket = 1;
    let mut done = 0;
    let mut in_line = RUNS - MAX as usize;
    while done < RUNS {
        let mut pending = Vec::new();
        for run in &created {
            let current = stores[0].get_run(&tenant, &run.id).await.unwrap().unwrap();
            if current.status == RunStatus::Pending {
                pending.push(current);
            }
        }
        assert!(
            !pending.is_empty(),
            "a run waits while nobody holds its key"
        );
        assert!(
            pending.len() <= MAX as usize,
            "{} hold the key",
            pending.len()
        );
        let finishes = pending.iter().enumerate().map(|(i, current)| {
            let store = stores[i % PROCESSES].clone();
            let cp = finishing(current);
            async move { store.checkpoint_admitting(&cp).await }
        });
        let handed: Vec<Run> = futures::future::try_join_all(finishes)
            .await
            .unwrap()
            .into_iter()
            .flatten()
            .collect();
        done += pending.len();
        // The first in line, in order, and as many as were freed.
        let mut ids: Vec<RunId> = handed.iter().map(|r| r.id.clone()).collect();
        ids.sort();
        let mut expected: Vec<RunId> = (next_ticket..next_ticket + ids.len() as u64)
            .map(by_ticket)
            .collect();
        expected.sort();
        assert_eq!(ids, expected, "the first in line get the freed slots");
        next_ticket += ids.len() as u64;
        assert_eq!(
            handed.len(),
            pending.len().min(in_line),
            "each freed slot handed on while anyone waits"
        );
        in_line -= handed.len();
        let (holding, waiting) = holders(&*stores[0], &tenant).await;
        assert!(holding <= u64::from(MAX), "{holding} hold the key");
        assert_eq!(waiting as usize, in_line);
    }
    assert_eq!(holders(&*stores[0], &tenant).await, (0, 0), "nothing left");
}

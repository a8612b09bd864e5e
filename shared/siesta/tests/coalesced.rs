//! Coalesced checkpoints: branches of a `map` that finish together share checkpoints,
//! each within one transaction's limits (the embedded store refuses more, as DynamoDB).

mod support;

use serde_json::json;
use siesta::*;
use support::{create, output, world};

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.register("squares", |ctx: Context, items: Vec<u64>| async move {
        let result = ctx
            .map("square", items, |ctx, item, _index| async move {
                ctx.step("compute", move |_| async move { Ok(item * item) })
                    .await
            })
            .await?;
        result.values()
    });
    reg
}

#[tokio::test]
async fn branches_finishing_together_share_checkpoints_within_the_transaction_limits() {
    let w = world(registry());
    let items: Vec<u64> = (0..60).collect();
    let id = create(&w, "squares", json!(items)).await;
    let (_, writes_before) = w.probe().counts();
    w.run_until_idle().await;
    let (_, writes_after) = w.probe().counts();
    let run = w.run(&id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let expected: Vec<u64> = items.iter().map(|i| i * i).collect();
    assert_eq!(output(&run), json!(expected));
    // One checkpoint per branch would be 60 and more. How the branches fall into
    // checkpoints depends on when the store answers (9 to 16 writes seen, all told);
    // half the branches is far above that and far below one each.
    let writes = writes_after - writes_before;
    assert!(writes < 30, "{writes} writes for 60 branches");
    let steps = w
        .journal(&id)
        .await
        .into_iter()
        .filter(|e| {
            e.kind == OperationKind::Step && matches!(e.state, EntryState::Succeeded { .. })
        })
        .count();
    assert_eq!(steps, 60, "every branch journaled its step");
}

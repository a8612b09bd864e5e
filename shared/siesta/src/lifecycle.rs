//! The run lifecycle as a pure transition function.
//!
//! `pending → running → waiting → running → … → completed | failed | cancelled`, plus
//! `parked` for runs that need an operator, `paused` for runs an operator holds, and
//! `queued` before `pending` for a run over one of its concurrency limits. Every status change the engine or the API
//! makes is first asked of [`decide`]; the write that follows is conditioned on the
//! run's version, so two writers cannot both apply a transition from the same state.

use crate::model::RunStatus;

/// Something that moves a run between statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifecycleEvent {
    /// An engine takes the run's lease (a running run only when its lease lapsed).
    Claim,
    /// Every branch is suspended on a wait.
    Suspend,
    /// The time budget was spent; the run continues in a new invocation.
    Yield,
    /// The workflow returned a value.
    Complete,
    /// The workflow returned an error.
    Fail,
    /// The run needs an operator.
    Park,
    /// Cancellation is asked for while the run is leased; the holder will honour it.
    RequestCancel,
    /// The run is cancelled: at once when not running, at a boundary when running.
    Cancel,
    /// An operator lets a parked run continue.
    Resume,
    /// A queued run is given the last slot it waited for (by the write that freed it).
    Admit,
    /// An operator asks to pause a running run: its holder pauses it at its next
    /// boundary (its attempt in flight finishes and checkpoints first).
    RequestPause,
    /// The run is paused: at once when pending or waiting, at a boundary when running.
    /// It takes no turn until resumed.
    Pause,
    /// An operator restarts the run from a step (docs/operations.md): it goes on from
    /// there, pending — a finished run too, the one way back from finished. Not while
    /// it is held by a live lease (the engine cancels it first) nor while queued (it
    /// has not begun).
    Restart,
}

/// Why a transition is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The run is finished; nothing changes it any more.
    #[error("the run is already {0}")]
    Finished(RunStatus),
    /// The event makes no sense in this status.
    #[error("{event:?} is not allowed while the run is {from}")]
    NotAllowed {
        /// The current status.
        from: RunStatus,
        /// The refused event.
        event: LifecycleEvent,
    },
}

/// The status a run in `from` moves to on `event`, or why it cannot.
pub fn decide(from: RunStatus, event: LifecycleEvent) -> Result<RunStatus, Rejected> {
    use LifecycleEvent as E;
    use RunStatus as S;
    if from.is_finished() && event != E::Restart {
        return Err(Rejected::Finished(from));
    }
    let next = match (from, event) {
        (S::Pending | S::Waiting | S::Running, E::Claim) => S::Running,
        (S::Running, E::Suspend) => S::Waiting,
        (S::Running, E::Yield) => S::Pending,
        (S::Running, E::Complete) => S::Completed,
        (S::Running, E::Fail) => S::Failed,
        (S::Running, E::Park) => S::Parked,
        (S::Running, E::RequestCancel) => S::Running,
        (S::Queued | S::Pending | S::Running | S::Waiting | S::Parked | S::Paused, E::Cancel) => {
            S::Cancelled
        }
        (S::Parked | S::Paused, E::Resume) => S::Pending,
        (S::Running, E::RequestPause) => S::Running,
        (S::Pending | S::Waiting | S::Running, E::Pause) => S::Paused,
        (S::Queued, E::Admit) => S::Pending,
        (
            S::Pending
            | S::Running
            | S::Waiting
            | S::Parked
            | S::Paused
            | S::Completed
            | S::Failed
            | S::Cancelled,
            E::Restart,
        ) => S::Pending,
        (from, event) => return Err(Rejected::NotAllowed { from, event }),
    };
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use LifecycleEvent as E;
    use RunStatus as S;

    const EVENTS: [LifecycleEvent; 13] = [
        E::Claim,
        E::Suspend,
        E::Yield,
        E::Complete,
        E::Fail,
        E::Park,
        E::RequestCancel,
        E::Cancel,
        E::Resume,
        E::Admit,
        E::RequestPause,
        E::Pause,
        E::Restart,
    ];

    /// The whole table, every status × every event, written out by hand: `None` is a
    /// rejection.
    fn expected(from: RunStatus, event: LifecycleEvent) -> Option<RunStatus> {
        let row: [Option<RunStatus>; 13] = match from {
            //                 Claim          Suspend          Yield            Complete           Fail            Park            RequestCancel   Cancel             Resume  Admit  RequestPause  Pause  Restart
            S::Queued => [
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                Some(S::Pending),
                None,
                None,
                None,
            ],
            S::Pending => [
                Some(S::Running),
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                None,
                None,
                Some(S::Paused),
                Some(S::Pending),
            ],
            S::Running => [
                Some(S::Running),
                Some(S::Waiting),
                Some(S::Pending),
                Some(S::Completed),
                Some(S::Failed),
                Some(S::Parked),
                Some(S::Running),
                Some(S::Cancelled),
                None,
                None,
                Some(S::Running),
                Some(S::Paused),
                Some(S::Pending),
            ],
            S::Waiting => [
                Some(S::Running),
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                None,
                None,
                None,
                Some(S::Paused),
                Some(S::Pending),
            ],
            S::Parked => [
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                Some(S::Pending),
                None,
                None,
                None,
                Some(S::Pending),
            ],
            S::Paused => [
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                Some(S::Cancelled),
                Some(S::Pending),
                None,
                None,
                None,
                Some(S::Pending),
            ],
            S::Completed | S::Failed | S::Cancelled => {
                let mut row = [None; 13];
                row[12] = Some(S::Pending);
                row
            }
        };
        let i = EVENTS.iter().position(|e| *e == event).unwrap();
        row[i]
    }

    #[test]
    fn transition_table_is_exactly_as_specified() {
        for from in S::ALL {
            for event in EVENTS {
                let got = decide(from, event);
                match expected(from, event) {
                    Some(next) => assert_eq!(got, Ok(next), "{from} on {event:?}"),
                    None => assert!(
                        got.is_err(),
                        "{from} on {event:?} should be rejected, got {got:?}"
                    ),
                }
            }
        }
    }

    #[test]
    fn finished_runs_reject_everything_but_a_restart_as_finished() {
        for from in [S::Completed, S::Failed, S::Cancelled] {
            assert_eq!(decide(from, E::Restart), Ok(S::Pending));
            for event in EVENTS.into_iter().filter(|e| *e != E::Restart) {
                assert_eq!(decide(from, event), Err(Rejected::Finished(from)));
            }
        }
    }

    #[test]
    fn every_unfinished_run_can_be_cancelled() {
        for from in S::ALL.into_iter().filter(|s| !s.is_finished()) {
            assert_eq!(decide(from, E::Cancel), Ok(S::Cancelled));
        }
    }

    #[test]
    fn only_a_running_run_can_finish() {
        for from in S::ALL {
            for event in [E::Complete, E::Fail, E::Park, E::Suspend, E::Yield] {
                assert_eq!(
                    decide(from, event).is_ok(),
                    from == S::Running,
                    "{from} on {event:?}"
                );
            }
        }
    }
}

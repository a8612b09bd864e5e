//! `siesta runs cancel|pause|resume|restart|upgrade|redrive --filter …`: start a bulk
//! action (`POST /runs/actions`) and follow its progress on stderr until it ends, or
//! print its id with `--no-wait`; `siesta runs action [ID] [--cancel]` shows a job,
//! cancels it, or lists the caller's jobs.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context as _, bail};
use siesta_client::{
    Rfc3339, RunsActionFilter, RunsActionKind, RunsActionStatus, RunsActionView, StartRunsAction,
};

use crate::runs::Remote;

/// How often a followed job is read again.
const POLL: Duration = Duration::from_millis(500);

/// `--filter workflow=order,status=failed,failed_after=2027-01-15T08:00:00Z,...` as the
/// API's filter: comma-separated `field=value` pairs (`dead_lettered` alone, or
/// `=true`). Every field of `POST /runs/actions`' filter is accepted.
pub fn parse_filter(text: &str) -> anyhow::Result<RunsActionFilter> {
    let mut filter = RunsActionFilter::default();
    let time = |field: &str, value: &str| -> anyhow::Result<Option<Rfc3339>> {
        Ok(Some(value.parse().with_context(|| {
            format!("--filter {field}: not a time (RFC 3339, e.g. 2027-01-15T08:00:00Z)")
        })?))
    };
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (field, value) = pair.split_once('=').unwrap_or((pair, "true"));
        let (field, value) = (field.trim(), value.trim());
        match field {
            "workflow" => filter.workflow = Some(value.to_owned()),
            "tenant" => filter.tenant = Some(value.to_owned()),
            "status" => {
                filter.status = Some(
                    serde_json::from_value(serde_json::Value::String(value.to_owned()))
                        .with_context(|| format!("--filter status: unknown status '{value}'"))?,
                )
            }
            "build" => filter.build = Some(value.to_owned()),
            "error_kind" => filter.error_kind = Some(value.to_owned()),
            "created_after" => filter.created_after = time(field, value)?,
            "created_before" => filter.created_before = time(field, value)?,
            "failed_after" => filter.failed_after = time(field, value)?,
            "failed_before" => filter.failed_before = time(field, value)?,
            "dead_lettered" => {
                filter.dead_lettered = value.parse().with_context(|| {
                    format!("--filter dead_lettered: not true or false: '{value}'")
                })?
            }
            other => bail!(
                "--filter: unknown field '{other}' (workflow, status, build, error_kind, \
                 created_after, created_before, failed_after, failed_before, dead_lettered, \
                 tenant)"
            ),
        }
    }
    if filter == RunsActionFilter::default() {
        bail!(
            "--filter names no field: give at least one, e.g. --filter workflow=order,status=failed"
        );
    }
    Ok(filter)
}

/// A bulk action as asked on the command line.
#[derive(Debug, Clone)]
pub struct Bulk {
    /// The action.
    pub action: RunsActionKind,
    /// `--filter`.
    pub filter: String,
    /// `--rate`: runs per second.
    pub rate: Option<u32>,
    /// `--no-wait`: print the job's id and return.
    pub no_wait: bool,
    /// For restart: `--from`, `--as-new`, `--repeat-tool-calls`.
    pub restart: (Option<String>, bool, bool),
}

/// One line of a job's progress.
fn progress_line(job: &RunsActionView) -> String {
    let mut line = format!(
        "{} {}: {} matched, {} done, {} skipped, {} failed",
        action_name(job.action),
        job.id,
        job.matched,
        job.done,
        job.skipped,
        job.failed
    );
    match job.status {
        RunsActionStatus::Running => {}
        status => line.push_str(&format!(" ({})", status_name(status))),
    }
    line
}

fn action_name(action: RunsActionKind) -> &'static str {
    match action {
        RunsActionKind::Cancel => "cancel",
        RunsActionKind::Pause => "pause",
        RunsActionKind::Resume => "resume",
        RunsActionKind::Restart => "restart",
        RunsActionKind::Upgrade => "upgrade",
        RunsActionKind::Redrive => "redrive",
    }
}

fn status_name(status: RunsActionStatus) -> &'static str {
    match status {
        RunsActionStatus::Running => "running",
        RunsActionStatus::Done => "done",
        RunsActionStatus::Failed => "failed",
        RunsActionStatus::Cancelled => "cancelled",
    }
}

impl Remote {
    /// `runs ACTION --filter …`: start the job; follow it to its end (a line on
    /// stderr, rewritten in place on a terminal), then print it as `runs action ID`
    /// does; with `--no-wait`, print its id only.
    pub async fn bulk(&self, bulk: Bulk) -> anyhow::Result<()> {
        let (from, as_new, repeat_tool_calls) = bulk.restart;
        let request = StartRunsAction {
            action: bulk.action,
            filter: parse_filter(&bulk.filter)?,
            from,
            as_new,
            repeat_tool_calls,
            rate: bulk.rate,
        };
        let client = self.client();
        let mut job = client
            .start_runs_action(&request)
            .await
            .map_err(|e| self.failed(e))?;
        if bulk.no_wait {
            if self.json {
                self.print(&Self::shown(&job)?, |_| {});
            } else {
                println!("{}", job.id);
            }
            return Ok(());
        }
        let terminal = std::io::stderr().is_terminal();
        let mut shown = String::new();
        loop {
            let line = progress_line(&job);
            if line != shown {
                if terminal {
                    eprint!("\r\x1b[2K{line}");
                    let _ = std::io::stderr().flush();
                } else {
                    eprintln!("{line}");
                }
                shown = line;
            }
            if job.status.is_finished() {
                break;
            }
            tokio::time::sleep(POLL).await;
            job = client
                .runs_action(&job.id)
                .await
                .map_err(|e| self.failed(e))?;
        }
        if terminal {
            eprintln!();
        }
        self.show_job(&job)?;
        if job.status == RunsActionStatus::Failed {
            bail!(
                "the bulk action failed: {}",
                job.error.as_deref().unwrap_or("no reason given")
            );
        }
        Ok(())
    }

    /// `runs action [ID] [--cancel]`: a job, cancelled first with `--cancel`; without
    /// an id, the caller's jobs, newest first.
    pub async fn action(&self, id: Option<&str>, cancel: bool) -> anyhow::Result<()> {
        let client = self.client();
        let Some(id) = id else {
            let list = client.runs_actions().await.map_err(|e| self.failed(e))?;
            self.print(&Self::shown(&list)?, |_| {
                if list.jobs.is_empty() {
                    println!("no bulk actions");
                }
                for job in &list.jobs {
                    println!("{}", progress_line(job));
                }
            });
            return Ok(());
        };
        let job = if cancel {
            client.cancel_runs_action(id).await
        } else {
            client.runs_action(id).await
        }
        .map_err(|e| self.failed(e))?;
        self.show_job(&job)
    }

    fn show_job(&self, job: &RunsActionView) -> anyhow::Result<()> {
        self.print(&Self::shown(job)?, |_| {
            println!("{}", progress_line(job));
            println!("  started by {} at {}", job.by, job.created_at);
            if let Some(by) = &job.cancelled_by {
                println!("  cancelled by {by}");
            }
            if let Some(error) = &job.error {
                println!("  error: {error}");
            }
            for note in &job.skipped_reasons {
                println!("  skipped {}: {}", note.run_id, note.why);
            }
            for note in &job.failures {
                println!("  failed  {}: {}", note.run_id, note.why);
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_comma_separated_fields_with_their_values() {
        let filter = parse_filter(
            "workflow=order, status=failed,failed_after=2027-01-15T08:00:00Z,dead_lettered,error_kind=Http,tenant=acme",
        )
        .unwrap();
        assert_eq!(filter.workflow.as_deref(), Some("order"));
        assert_eq!(filter.status, Some(siesta::RunStatus::Failed));
        assert_eq!(
            filter.failed_after.map(|t| t.to_string()).as_deref(),
            Some("2027-01-15T08:00:00.000Z")
        );
        assert!(filter.dead_lettered);
        assert_eq!(filter.error_kind.as_deref(), Some("Http"));
        assert_eq!(filter.tenant.as_deref(), Some("acme"));
    }

    #[test]
    fn an_unknown_field_a_bad_value_or_an_empty_filter_is_refused() {
        assert!(parse_filter("colour=red").is_err());
        assert!(parse_filter("status=sleepy").is_err());
        assert!(parse_filter("created_after=yesterday").is_err());
        assert!(parse_filter("").is_err());
        assert!(parse_filter(" , ").is_err());
    }
}

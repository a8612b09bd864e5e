//! `siesta workflows`: an operator's pause and resume of a whole workflow
//! (`POST /workflows/{name}/pause|resume`), and what its pause is now.

use siesta_client::WorkflowPauseView;

use crate::runs::Remote;

/// One line about a workflow's pause.
fn said(view: &WorkflowPauseView) -> String {
    let by = view.by.as_deref().unwrap_or("-");
    let job = view
        .job
        .as_deref()
        .map(|job| format!("; its runs: `siesta runs action {job}`"))
        .unwrap_or_default();
    if view.paused {
        format!(
            "{}: paused by {by}; new starts {}{job}",
            view.workflow,
            if view.starts == "refuse" {
                "refused"
            } else {
                "queued paused"
            }
        )
    } else {
        format!("{}: not paused{job}", view.workflow)
    }
}

impl Remote {
    /// `workflows pause NAME [--refuse-starts]`.
    pub async fn pause_workflow(&self, name: &str, refuse_starts: bool) -> anyhow::Result<()> {
        let starts = if refuse_starts { "refuse" } else { "queue" };
        let view = self
            .client()
            .pause_workflow(name, Some(starts))
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&view)?, |_| println!("{}", said(&view)));
        Ok(())
    }

    /// `workflows resume NAME`.
    pub async fn resume_workflow(&self, name: &str) -> anyhow::Result<()> {
        let view = self
            .client()
            .resume_workflow(name)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&view)?, |_| println!("{}", said(&view)));
        Ok(())
    }

    /// `workflows show NAME`.
    pub async fn workflow_pause(&self, name: &str) -> anyhow::Result<()> {
        let view = self
            .client()
            .workflow_pause(name)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&view)?, |_| println!("{}", said(&view)));
        Ok(())
    }
}

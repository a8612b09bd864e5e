//! `siesta schedules`: a server's schedules with their next ticks (`GET /schedules`), and
//! an operator's pause, resume and trigger of one.

use serde_json::Value;

use crate::runs::{Remote, api_time, local_time};

impl Remote {
    /// `schedules list`: every schedule of the caller's tenant, with its next tick.
    pub async fn schedules(&self) -> anyhow::Result<()> {
        let list = self
            .client()
            .schedules()
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&list)?, |b| print!("{}", schedules_table(b)));
        Ok(())
    }

    /// `schedules pause NAME`.
    pub async fn pause_schedule(&self, name: &str) -> anyhow::Result<()> {
        let view = self
            .client()
            .pause_schedule(name)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&view)?, |_| println!("{name}: paused"));
        Ok(())
    }

    /// `schedules resume NAME`.
    pub async fn resume_schedule(&self, name: &str) -> anyhow::Result<()> {
        let view = self
            .client()
            .resume_schedule(name)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&view)?, |b| {
            let next = api_time(&b["next"]).map_or_else(|| "-".to_owned(), local_time);
            println!("{name}: resumed; next tick {next}");
        });
        Ok(())
    }

    /// `schedules trigger NAME`: a run now; `key` makes a retry answer the same run.
    pub async fn trigger_schedule(&self, name: &str, key: Option<&str>) -> anyhow::Result<()> {
        let run = self
            .client()
            .trigger_schedule(name, key)
            .await
            .map_err(|e| self.failed(e))?;
        self.print(&Self::shown(&run)?, |b| {
            println!(
                "{name}: started run {} ({})",
                b["id"].as_str().unwrap_or(""),
                b["status"].as_str().unwrap_or("")
            );
        });
        Ok(())
    }
}

/// The table `schedules list` prints: a schedule a line, its next tick in local time.
pub fn schedules_table(body: &Value) -> String {
    let mut out = format!(
        "{:<24} {:<16} {:<16} {:<20} {:<26} {:<8}\n",
        "SCHEDULE", "WORKFLOW", "CRON", "TIMEZONE", "NEXT", "STATE"
    );
    for s in body["schedules"].as_array().into_iter().flatten() {
        let next = api_time(&s["next"]).map_or_else(|| "-".to_owned(), local_time);
        let state = match (s["disabled"] == true, s["paused"] == true) {
            (true, _) => "disabled",
            (false, true) => "paused",
            _ => "active",
        };
        out.push_str(&format!(
            "{:<24} {:<16} {:<16} {:<20} {:<26} {:<8}\n",
            s["name"].as_str().unwrap_or(""),
            s["workflow"].as_str().unwrap_or(""),
            s["cron"].as_str().unwrap_or(""),
            s["timezone"].as_str().unwrap_or(""),
            next,
            state,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_table_shows_each_schedule_and_its_state() {
        let table = schedules_table(&json!({"schedules": [
            {"name": "nightly-report", "workflow": "report", "cron": "0 2 * * *",
             "timezone": "UTC", "next": null, "paused": true, "disabled": false},
        ]}));
        let line = table.lines().nth(1).unwrap();
        assert!(line.starts_with("nightly-report"), "{table}");
        assert!(
            line.contains("0 2 * * *") && line.trim_end().ends_with("paused"),
            "{table}"
        );
    }
}

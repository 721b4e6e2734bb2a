//! `outbox-check record`: the database-side recorder in a test database the user names. `start`
//! installs it on the outbox table, `stop` turns what it logged into a history in the trace
//! format and removes it.

use outbox_check::record;
use outbox_check::store::profile::Profile;

use super::*;

/// `outbox-check record`'s arguments (the help text is on the command in main.rs).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// start: install the recorder on the table (two triggers on it and a schema of its own,
    /// outbox_check_recorder; nothing else is touched). stop: write what it recorded as a
    /// history, read with the profile's [columns] and [statuses], and remove it.
    #[arg(value_enum)]
    pub action: Action,
    /// The test database (a PostgreSQL URL).
    #[arg(long, value_name = "URL")]
    pub database_url: String,
    /// start: the outbox table, as your SQL names it (`jobs`, `queue.jobs`).
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
    /// start: consent to install the recorder's objects in that database (stop removes them).
    #[arg(long)]
    pub install: bool,
    /// stop: the SQL profile whose [columns] and [statuses] name the table's fields.
    #[arg(long, value_name = "PROFILE.toml")]
    pub profile: Option<std::path::PathBuf>,
    /// stop: where to write the history (JSON Lines).
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
    /// stop: the attempt budget your queue runs with.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_attempts: u32,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Action {
    Start,
    Stop,
}

fn connect(url: &str) -> Result<postgres::Client, String> {
    url.parse::<postgres::Config>()
        .map_err(|e| format!("--database-url: {e}"))?
        .connect(postgres::NoTls)
        .map_err(|e| format!("cannot connect to {url}: {}", said(&e)))
}

/// PostgreSQL's own message, on one line.
fn said(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().replace('\n', " ");
    }
    // The cause of a connection error (refused, unknown host) is in its source.
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text.replace('\n', " ")
}

fn recording(client: &mut postgres::Client) -> Result<Option<String>, String> {
    let exists = client
        .query_one("SELECT to_regclass('outbox_check_recorder.recording') IS NOT NULL", &[])
        .map_err(|e| said(&e))?
        .get::<_, bool>(0);
    if !exists {
        return Ok(None);
    }
    let row = client.query_one("SELECT table_name FROM outbox_check_recorder.recording", &[]).map_err(|e| said(&e))?;
    Ok(Some(row.get(0)))
}

pub fn run(args: Args) -> ExitCode {
    match go(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(problem) => {
            eprintln!("outbox-check: {problem}");
            ExitCode::from(2)
        }
    }
}

fn go(args: Args) -> Result<(), String> {
    let database_url = args.database_url;
    match args.action {
        Action::Start => {
            let table = args.table.ok_or("record start: --table names the outbox table to record")?;
            if !args.install {
                return Err(format!(
                    "record start installs a recorder in {database_url} (a schema outbox_check_recorder and two triggers on {table}); say --install to allow it"
                ));
            }
            let mut client = connect(&database_url)?;
            if let Some(on) = recording(&mut client)? {
                return Err(format!(
                    "a recording of {on} is already running in {database_url}: `outbox-check record stop` ends it"
                ));
            }
            let mut tx = client.transaction().map_err(|e| said(&e))?;
            tx.batch_execute(&record::install_sql(&table))
                .map_err(|e| format!("cannot record {table}: {}", said(&e)))?;
            tx.commit().map_err(|e| said(&e))?;
            println!(
                "recording every change to {table} in {database_url}; run your tests, then: outbox-check record stop --database-url URL --profile PROFILE.toml --out history.jsonl"
            );
            Ok(())
        }
        Action::Stop => {
            let profile = args.profile.ok_or("record stop: --profile names the profile to read the rows with")?;
            let out = args.out.ok_or("record stop: --out names the file to write the history to")?;
            let max_attempts = args.max_attempts;
            let profile = Profile::load(&profile)?;
            let mut client = connect(&database_url)?;
            let Some(table) = recording(&mut client)? else {
                return Err(format!(
                    "no recording is running in {database_url}: `outbox-check record start` begins one"
                ));
            };
            let changes = record::read(&mut client, &profile, &record::session_name).map_err(|e| said(&e))?;
            let recorded = record::history(&profile, max_attempts, &changes, None);
            std::fs::write(&out, outbox_check::trace::to_jsonl(&recorded.header, &recorded.events))
                .map_err(|e| format!("cannot write {}: {e} (the recorder is still installed)", out.display()))?;
            let mut tx = client.transaction().map_err(|e| said(&e))?;
            tx.batch_execute(&record::remove_sql(&table)).map_err(|e| said(&e))?;
            tx.commit().map_err(|e| said(&e))?;
            let count = |kind: &str| {
                recorded
                    .events
                    .iter()
                    .filter(|e| serde_json::to_value(e).ok().is_some_and(|v| v["event"] == kind))
                    .count()
            };
            println!(
                "recorded {} changes of {table} by {} session(s) ({}) into {}: {} enqueues, {} claims, {} writes, {} releases, {} requeues; the recorder is removed",
                changes.len(),
                recorded.sessions.len(),
                recorded.sessions.join(", "),
                out.display(),
                count("enqueue"),
                count("claim"),
                count("write"),
                count("release"),
                count("requeue"),
            );
            println!("not seen by a recorder:");
            for what in record::NOT_SEEN {
                println!("  - {what}");
            }
            println!(
                "check it: outbox-check trace {} --design {}",
                out.display(),
                if profile.file.design.ends_with(".toml") {
                    profile
                        .origin
                        .parent()
                        .unwrap_or(std::path::Path::new("."))
                        .join(&profile.file.design)
                        .display()
                        .to_string()
                } else {
                    profile.file.design.clone()
                }
            );
            Ok(())
        }
    }
}

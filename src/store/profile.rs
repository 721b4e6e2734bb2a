//! SQL profiles: the user's own schema and statements, run as a [`Store`] so conformance holds
//! them against the core of the design they claim to implement (docs/sql-profile.md).
//!
//! A profile names a design (a built-in or a design file), a schema (a DDL file), one statement
//! per operation — run as written, only its named parameters bound (`:now`, `:id`, `:token` …) —
//! and a SELECT that reads the table in the model's shape. Nothing is rewritten: the log of
//! what ran is the user's statements with their parameters, ready to paste.
//!
//! Values: ids, tenants, owners and tokens are integers (message `m3` is 3, tenant `tenant1`
//! is 1, relay `r2` is 2); times are integer milliseconds; failure codes are text (`timeout`,
//! `unavailable`, `rejected`, `budget_spent`); statuses are the profile's own names.

use super::bind::{Store, StoreError};
use crate::core::design_file::StatusNames;
use crate::core::{
    ClaimRequest, EnqueueRequest, EnqueueResult, FailureCode, Instant, Lease, LeaseToken, MessageId, Outbox, Policy,
    RelayId, Row, Status, TenantId, WriteKind, WriteRequest, WriteResult,
};
use crate::design::Design;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod concurrent;
mod params;
pub use concurrent::ConcurrentReport;

/// A profile as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// The design the SQL claims to implement: a built-in's name or a design file (relative to
    /// the profile).
    pub design: String,
    /// The DDL that creates the table (relative to the profile), run before every case.
    pub schema: String,
    pub statements: Statements,
    /// How each terminal write shows that it applied: `rows-affected` (default) or `returning`
    /// (a row back).
    #[serde(default)]
    pub observe: BTreeMap<String, Observe>,
    /// The profile's status values for the model's six statuses (default: the design file's
    /// `[statuses]`, else the model's names).
    #[serde(default)]
    pub statuses: Option<StatusNames>,
    /// The table's column for a model field, where its name is not the model's
    /// (`message_id = "id"`): read from every statement's result, so `RETURNING *` works. A list
    /// names the field in results that call it differently (underway's claim returns
    /// `current_attempt` as `attempt_number`): the first a result has is read.
    #[serde(default)]
    pub columns: BTreeMap<String, ColumnNames>,
    /// Time the queue's way: the model's lease as the queue's own lease or rescue horizon.
    #[serde(default)]
    pub time: Option<TimeFile>,
    /// A queue's own parameter names: onto the run's (`max_to_lock = ":batch"`) or a constant
    /// its code passes (`queue = "default"`), for every statement, or in a table of one
    /// statement's (`[parameters.mark_published] state = "completed"`).
    #[serde(default)]
    pub parameters: BTreeMap<String, toml::Value>,
    /// River's `/* TEMPLATE: name */` markers and the text each stands for (`schema = ""`), in
    /// the statements and the schema.
    #[serde(default)]
    pub templates: BTreeMap<String, String>,
}

/// `[time]`: what the queue's durations are in its own units.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeFile {
    /// The queue's lease, visibility timeout or rescue horizon ("1h", "30m", "4h", "250ms"):
    /// each run's lease is mapped onto it, so the run's times scale by it (the run's lease of
    /// 100 ms is the queue's hour) and `:lease_ms`, `:horizon` and the clock reach it.
    #[serde(alias = "rescue_after")]
    pub lease: Millis,
    /// Whose units the retry delays are in: `"scaled"` (the default: the statements are given
    /// the design's delay, `:retry_at`, at the run's scale) or `"absolute"` (the queue computes
    /// its own, `exp(attempts) * interval '1 second'`: the design file's backoff is read in the
    /// queue's milliseconds, and the model waits each delay rounded up to its next millisecond).
    #[serde(default)]
    pub delays: Delays,
}

/// `[time] delays`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delays {
    #[default]
    Scaled,
    Absolute,
}

/// A duration as a person writes it: a whole number and a unit (`ms`, `s`, `m`, `h`, `d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Millis(pub u64);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        let text = String::deserialize(d)?;
        parse_millis(&text).map(Millis).map_err(serde::de::Error::custom)
    }
}

/// "1h" → 3,600,000; a number without a unit, or a unit not known, is refused.
pub fn parse_millis(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    let (number, unit) = t.split_at(digits);
    let factor = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?} is not a duration: a whole number and a unit (ms, s, m, h, d), as \"1h\"")),
    };
    match number.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n * factor),
        _ => Err(format!("{text:?} is not a duration: a whole number above 0 and a unit (ms, s, m, h, d)")),
    }
}

/// What joins the statements of a write given as a list (`mark_retry = ["…", "…"]`).
pub const PARTS: &str = "\n-- outbox-check: the next statement of this write\n";

/// A write's statements, in order: one, or the parts of a list.
pub fn parts(sql: &str) -> Vec<&str> {
    sql.split(PARTS).collect()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrParts {
    One(String),
    Parts(Vec<String>),
}

impl OneOrParts {
    fn joined<E: serde::de::Error>(self) -> Result<String, E> {
        match self {
            OneOrParts::One(one) => Ok(one),
            OneOrParts::Parts(parts) if parts.is_empty() => Err(E::custom("an empty list of statements")),
            OneOrParts::Parts(parts) => Ok(parts.join(PARTS)),
        }
    }
}

fn one_or_parts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    OneOrParts::deserialize(d)?.joined()
}

fn one_or_parts_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<OneOrParts>::deserialize(d)?.map(OneOrParts::joined).transpose()
}

/// The statements, by operation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statements {
    pub enqueue: String,
    /// Takes up to `:batch` rows and returns them: `message_id`, `lease_token`, `attempts`
    /// (and `tenant_id` where the table has one).
    pub claim: String,
    /// A write is one statement, or a list run in one transaction that applies only where
    /// every statement changes a row (underway's: its code fails on a statement that matched
    /// none); kept joined by [`PARTS`].
    #[serde(deserialize_with = "one_or_parts")]
    pub mark_published: String,
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub mark_ambiguous: Option<String>,
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub mark_retry: Option<String>,
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub mark_failed: Option<String>,
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub mark_exhausted: Option<String>,
    /// The maintenance job; returns the ids it moved (`message_id`).
    pub reap: Option<String>,
    /// A rescuer's read (designs with `maintenance.job = "rescue-expired"`): the rows whose lease
    /// has expired at `:now`, each with `message_id` and `lease_token`; the first by id is taken.
    pub rescue_read: Option<String>,
    /// A rescuer's move of the row it read (`:id`, `:token` as read, `:now`, `:retry_at`): back
    /// to PENDING, or with its budget spent to EXHAUSTED (FAILED without one). Observed like a
    /// write.
    pub rescue: Option<String>,
    /// The rescuer's move of a row whose budget is spent, where the queue's code (not its SQL)
    /// decides between retrying and discarding (River's JobRescuer): run instead of `rescue`
    /// when the design moves the row to EXHAUSTED or FAILED.
    pub rescue_exhausted: Option<String>,
    /// A rescuer that finds and moves every expired lease in one statement, with no read before
    /// it (Graphile Worker's `resetLockedAt`): `:now`, `:horizon`, `:lease_ms`, `:max_attempts`.
    /// Held against the design's rescuer moving every expired lease, one after another. A list
    /// (Oban's Lifeline: the jobs with budget back to `available`, then the rest `discarded`)
    /// runs in one transaction, every part whether or not the one before it moved a row.
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub rescue_all: Option<String>,
    /// The scheduler (designs with `maintenance.scheduler`): makes every row whose retry time
    /// passed at `:now` claimable again; returns the ids it moved (`message_id`). A list runs as
    /// `rescue_all`'s does.
    #[serde(default, deserialize_with = "one_or_parts_opt")]
    pub schedule: Option<String>,
    /// Every row in the model's shape, ordered by `message_id`: `message_id` and `status`, and
    /// whichever of `tenant_id`, `attempts`, `lease_owner`, `lease_token`, `lease_expires_at`,
    /// `next_attempt_at`, `last_failure_code`, `created_at`, `published_at` the table keeps.
    pub rows: String,
}

impl Statements {
    /// Every statement by its key, `None` where an optional one is not given.
    pub fn each(&self) -> [(&'static str, Option<&String>); 14] {
        [
            ("enqueue", Some(&self.enqueue)),
            ("claim", Some(&self.claim)),
            ("mark_published", Some(&self.mark_published)),
            ("mark_ambiguous", self.mark_ambiguous.as_ref()),
            ("mark_retry", self.mark_retry.as_ref()),
            ("mark_failed", self.mark_failed.as_ref()),
            ("mark_exhausted", self.mark_exhausted.as_ref()),
            ("reap", self.reap.as_ref()),
            ("rescue_read", self.rescue_read.as_ref()),
            ("rescue", self.rescue.as_ref()),
            ("rescue_exhausted", self.rescue_exhausted.as_ref()),
            ("rescue_all", self.rescue_all.as_ref()),
            ("schedule", self.schedule.as_ref()),
            ("rows", Some(&self.rows)),
        ]
    }

    /// Every statement given, by its key, to be rewritten in place.
    fn each_mut(&mut self) -> Vec<(&'static str, &mut String)> {
        let mut all = vec![
            ("enqueue", &mut self.enqueue),
            ("claim", &mut self.claim),
            ("mark_published", &mut self.mark_published),
            ("rows", &mut self.rows),
        ];
        for (key, optional) in [
            ("mark_ambiguous", &mut self.mark_ambiguous),
            ("mark_retry", &mut self.mark_retry),
            ("mark_failed", &mut self.mark_failed),
            ("mark_exhausted", &mut self.mark_exhausted),
            ("reap", &mut self.reap),
            ("rescue_read", &mut self.rescue_read),
            ("rescue", &mut self.rescue),
            ("rescue_exhausted", &mut self.rescue_exhausted),
            ("rescue_all", &mut self.rescue_all),
            ("schedule", &mut self.schedule),
        ] {
            all.extend(optional.as_mut().map(|sql| (key, sql)));
        }
        all
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Observe {
    /// The statement changed a row.
    #[default]
    RowsAffected,
    /// The statement returned a row.
    Returning,
    /// The row was there before the statement and is gone after it (a completion by DELETE
    /// whose driver reports no count).
    RowGone,
    /// The row's `row_version` column, as the rows SELECT gives it, moved.
    RowVersion,
    /// The row as the rows SELECT gives it changed (a statement that returns its rows whether
    /// it changed them or not: River's JobSetStateIfRunningMany).
    RowChanged,
}

/// A profile read and checked: its design, its schema's text, where it came from.
#[derive(Clone, Debug)]
pub struct Profile {
    pub file: ProfileFile,
    /// The status names in force: the profile's, else its design file's, else the model's.
    pub statuses: StatusNames,
    pub design: Design,
    pub origin: PathBuf,
    /// Problems of the file that do not stop a store from reading the statements: reported
    /// with theirs, all at once (exit 2 before the first case).
    pub problems: Vec<String>,
    /// `[parameters]` read.
    parameters: params::Parameters,
    /// The schema's files (a migrations directory's, in order), each run on its own as a
    /// migration tool runs it: one transaction each.
    schema_files: Vec<(String, String)>,
}

/// The row fields a profile's SELECT may give, by column name (`row_version` is read only to
/// observe writes with `observe = "row-version"`, never compared).
const COLUMNS: [&str; 12] = [
    "row_version",
    "message_id",
    "tenant_id",
    "status",
    "attempts",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "next_attempt_at",
    "last_failure_code",
    "created_at",
    "published_at",
];

impl Profile {
    /// Whether every statement of `rescue_all` names the rows it moved and where to, in its
    /// `RETURNING` (the table's id and status columns, or `*`): what the concurrent run's
    /// history needs of a sweep (Oban's Lifeline does; Graphile Worker's resetLockedAt returns
    /// nothing). A design whose rescuer retries after a backoff needs the attempts too.
    pub fn sweep_names_its_moves(&self, policy: &crate::core::Policy) -> bool {
        let Some(sql) = &self.file.statements.rescue_all else { return false };
        let column = |field: &str| -> Vec<String> {
            match self.file.columns.get(field) {
                Some(names) => names.names().iter().map(|n| n.to_lowercase()).collect(),
                None => vec![field.to_string()],
            }
        };
        let mut needed = vec![column("message_id"), column("status")];
        if policy.rescue_to == crate::core::policy::RescueTarget::Retry {
            needed.push(column("attempts"));
        }
        parts(sql).iter().all(|part| {
            let lower = part.to_lowercase();
            let Some(at) = lower.rfind("returning") else { return false };
            let returned = &lower[at..];
            returned.contains('*') || needed.iter().all(|names| names.iter().any(|n| returned.contains(n.as_str())))
        })
    }

    /// Reads a profile, its design and its schema. A problem is one line naming the file, the
    /// key and what is wrong.
    pub fn load(path: &Path) -> Result<Profile, String> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read SQL profile {shown}: {e}"))?;
        let mut file: ProfileFile = toml::from_str(&text).map_err(|e| {
            let at = e.span().map_or(0, |s| s.start);
            let line = text[..at.min(text.len())].matches('\n').count() + 1;
            let message = e.message().replace('\n', " ");
            // The key the problem is at, where the message does not name it.
            match crate::core::design_file::key_at(&text, at) {
                Some(key) if !message.contains(&key) => format!("{shown}:{line}: {key}: {message}"),
                _ => format!("{shown}:{line}: {message}"),
            }
        })?;
        // sqlc's parameters are named parameters and River's templates their text: statements
        // from a queries.sql run as written.
        let keys: Vec<&str> = file.statements.each().iter().map(|(k, _)| *k).collect();
        let mut untemplated = Vec::new();
        let templates = file.templates.clone();
        for (key, sql) in file.statements.each_mut() {
            match params::expand_templates(&params::expand_sqlc(sql), &templates, params::Place::Statement) {
                Ok(expanded) => *sql = expanded,
                Err(names) => untemplated.push(format!(
                    "{shown}: statements.{key} has River's template marker /* TEMPLATE: {} */ and [templates] gives no text for it ({} = \"\" for River's default schema)",
                    names.join(" */, /* TEMPLATE: "),
                    names[0]
                )),
            }
        }
        // Every problem of the file at once, one line each.
        let (parameters, mut problems) = params::Parameters::read(&file.parameters, &keys, &shown);
        problems.extend(untemplated);
        for field in file.columns.keys().filter(|k| !COLUMNS.contains(&k.as_str())) {
            problems
                .push(format!("{shown}: columns.{field}: not a field of the model (one of {})", COLUMNS.join(", ")));
        }
        // `observe` names statements that end a lease: a misspelt one would be silently unused.
        const OBSERVED: [&str; 7] = [
            "mark_published",
            "mark_ambiguous",
            "mark_retry",
            "mark_failed",
            "mark_exhausted",
            "rescue",
            "rescue_exhausted",
        ];
        for key in file.observe.keys().filter(|k| !OBSERVED.contains(&k.as_str())) {
            problems.push(format!(
                "{shown}: observe.{key}: not a statement whose result is observed (one of {})",
                OBSERVED.join(", ")
            ));
        }
        if file.statements.rescue_all.is_some()
            && (file.statements.rescue_read.is_some() || file.statements.rescue.is_some())
        {
            problems.push(format!(
                "{shown}: statements.rescue_all: a rescuer is either one statement moving every expired lease (rescue_all) or a read and a move (rescue_read and rescue), not both"
            ));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let design = if file.design.ends_with(".toml") || file.design.contains('/') {
            crate::design::load(&dir.join(&file.design))
        } else {
            Design::parse(&file.design).ok_or_else(|| {
                format!("{shown}: design = {:?}: neither a built-in design nor a design file (FILE.toml)", file.design)
            })
        };
        let schema_sql = read_schema(&shown, &file.schema, &dir.join(&file.schema)).and_then(|files| {
            let mut expanded = Vec::new();
            for (name, sql) in files {
                let sql = params::expand_templates(&sql, &file.templates, params::Place::Schema).map_err(|names| {
                    format!(
                        "{shown}: schema {name} has River's template marker /* TEMPLATE: {} */ and [templates] gives no text for it",
                        names.join(" */, /* TEMPLATE: ")
                    )
                })?;
                expanded.push((name, sql));
            }
            Ok(expanded)
        });
        let (design, schema_files) = match (design, schema_sql) {
            (Ok(d), Ok(s)) => (d, s),
            (d, s) => {
                problems.extend(d.err());
                problems.extend(s.err());
                return Err(problems.join("\n"));
            }
        };
        let statuses = match (&file.statuses, design) {
            (Some(given), _) => given.clone(),
            (None, Design::Custom(c)) => c.statuses.clone().unwrap_or_default(),
            (None, _) => StatusNames::default(),
        };
        if let Err(e) = check_shared_names(&statuses) {
            problems.push(format!("{shown}: {e}"));
        }
        // Reported with the statements' problems, once a store has read them.
        Ok(Profile { file, design, schema_files, statuses, origin: path.to_path_buf(), problems, parameters })
    }

    /// A fresh SQLite store over the profile's schema, in memory.
    pub fn sqlite(&self) -> Result<Box<dyn Store>, StoreError> {
        let conn = rusqlite::Connection::open_in_memory()?;
        for (name, sql) in &self.schema_files {
            conn.execute_batch(sql).map_err(|e| {
                let file = if *name == self.file.schema { format!("{name:?}") } else { name.clone() };
                StoreError::Setup(format!("schema = {file}: {}", sqlite_said(&e)))
            })?;
        }
        Ok(Box::new(ProfileStore::open(Db::Sqlite(conn), self)?))
    }

    /// Stores on one PostgreSQL scratch database (or schema) for a whole sweep: the schema's
    /// DDL runs once in it, and every case starts from its tables emptied. Nothing outside the
    /// scratch database or schema is touched; it is dropped when the sweep ends.
    pub fn postgres(
        &self,
        url: &str,
        disposable: bool,
    ) -> Result<impl Fn() -> Result<Box<dyn Store>, StoreError> + '_, StoreError> {
        let mut scratch = self.scratch(url, disposable)?;
        let seeds = Seeds::take(&mut scratch)?;
        let shared = std::rc::Rc::new(std::cell::RefCell::new(scratch));
        // Checked once, before the first case.
        ProfileStore::open(Db::Postgres(shared.clone()), self)?;
        Ok(move || -> Result<Box<dyn Store>, StoreError> {
            seeds.restore(&mut shared.borrow_mut())?;
            Ok(Box::new(ProfileStore::open(Db::Postgres(shared.clone()), self)?) as Box<dyn Store>)
        })
    }

    /// A scratch database of the run's own holding the profile's schema, on the database's own
    /// clock (processes outside the harness read it): the store the application's enqueues and
    /// the design's reaper run through, and where it is. Dropped with the store.
    pub fn live(&self, url: &str) -> Result<LiveStore, StoreError> {
        let mut scratch =
            super::postgres::Scratch::database(url, false).map_err(|e| StoreError::Setup(e.to_string()))?;
        let place = scratch.place();
        if place.database.is_none() {
            return Err(StoreError::Setup(
                "this role may not create a database: a run of the user's relays needs a scratch database of its own"
                    .into(),
            ));
        }
        for (name, sql) in &self.schema_files {
            scratch.client().batch_execute(sql).map_err(|e| {
                StoreError::Setup(format!("the profile's schema ({name}): {}", super::bind::one_line(&e)))
            })?;
        }
        scratch.client().batch_execute("RESET search_path")?;
        let shared = std::rc::Rc::new(std::cell::RefCell::new(scratch));
        let store = ProfileStore::open(Db::Postgres(shared.clone()), self)?;
        Ok(LiveStore { store: Box::new(store), place, scratch: shared })
    }

    /// A scratch database of the run's own (else a scratch schema) holding the profile's schema,
    /// with the run's clock in place of the database's (docs/sql-profile.md, "Time").
    pub(crate) fn scratch(&self, url: &str, disposable: bool) -> Result<super::postgres::Scratch, StoreError> {
        let mut scratch =
            super::postgres::Scratch::database(url, disposable).map_err(|e| StoreError::Setup(e.to_string()))?;
        let place = scratch.place();
        if place.database.is_none() {
            if let Some(outside) = self.schema_files.iter().find_map(|(_, sql)| leaves_the_schema(sql)) {
                return Err(StoreError::Setup(format!(
                    "schema = {:?}: {outside} (this role may not create a scratch database)",
                    self.file.schema
                )));
            }
        }
        scratch.install_clock().map_err(|e| StoreError::Setup(e.to_string()))?;
        for (name, sql) in &self.schema_files {
            scratch.client().batch_execute(sql).map_err(|e| {
                StoreError::Setup(format!("the profile's schema ({name}): {}", super::bind::one_line(&e)))
            })?;
        }
        // A search path the DDL sets lasts for the DDL: statements run on the run's own.
        let path = match &place.database {
            Some(_) => "RESET search_path".to_string(),
            None => format!("SET search_path TO {}, pg_catalog", place.schema),
        };
        scratch.client().batch_execute(&path)?;
        let statements =
            self.file.statements.each().into_iter().flat_map(|(_, sql)| sql.cloned()).collect::<Vec<_>>().join("\n");
        let problems = clock_in_schema(scratch.client(), &place, &statements)?;
        if !problems.is_empty() {
            return Err(StoreError::Setup(format!("schema = {:?}: {}", self.file.schema, problems.join("; "))));
        }
        Ok(scratch)
    }
}

/// [`Profile::live`]'s store, where it is, and its connection (shared with the store).
pub struct LiveStore {
    pub store: Box<dyn Store>,
    pub place: super::postgres::Place,
    pub scratch: std::rc::Rc<std::cell::RefCell<super::postgres::Scratch>>,
}

/// A profile's status names: a table may have fewer than six, so one name may stand for several
/// statuses a row waiting or running can have — PENDING, IN_FLIGHT and AMBIGUOUS (pgmq keeps
/// no status: a message is visible or not) — or for FAILED and EXHAUSTED. Never for a status
/// that ends a row and one that does not, nor for PUBLISHED and a failure: those the table must
/// tell apart. The row's other columns and the claims still are compared (decision 92).
fn check_shared_names(statuses: &StatusNames) -> Result<(), String> {
    use crate::core::Status::*;
    let group = |s: Status| match s {
        Pending | InFlight | Ambiguous => 0,
        Published => 1,
        Failed | Exhausted => 2,
    };
    let names = statuses.names();
    for (i, (n, status)) in names.iter().enumerate() {
        if let Some((_, other)) = names[..i].iter().find(|(m, other)| m == n && group(*other) != group(*status)) {
            return Err(format!(
                "statuses: {n:?} names both {} and {}, which the table must tell apart (one name may stand for PENDING, IN_FLIGHT and AMBIGUOUS, or for FAILED and EXHAUSTED)",
                other.as_str(),
                status.as_str()
            ));
        }
    }
    Ok(())
}

/// The rows and sequence positions the schema's DDL left (a queue's seed rows: Graphile
/// Worker's task identifiers, a lookup table), kept aside once, so every case starts from them:
/// only what the run added is removed.
struct Seeds {
    /// Every user table, qualified and quoted, parents before the tables whose foreign keys
    /// name them.
    tables: Vec<String>,
    /// A table with rows after the DDL, its insertable columns, and the copy of its rows.
    rows: Vec<(String, String, String)>,
    /// Every sequence of the user's and its position after the DDL (`None`: never used).
    sequences: Vec<(String, Option<i64>)>,
}

impl Seeds {
    fn take(scratch: &mut super::postgres::Scratch) -> Result<Seeds, StoreError> {
        let pg = |e: super::postgres::PgError| StoreError::Postgres(e.to_string());
        let mut tables = scratch.user_tables().map_err(pg)?;
        let place = scratch.place();
        let client = scratch.client();
        // Parents first: a table goes once every table its foreign keys name (but itself) is in.
        let edges: Vec<(String, String)> = client
            .query(
                "SELECT format('%I.%I', cn.nspname, c.relname), format('%I.%I', pn.nspname, p.relname)
                   FROM pg_constraint k
                   JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace
                   JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace pn ON pn.oid = p.relnamespace
                  WHERE k.contype = 'f'",
                &[],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut ordered = Vec::new();
        while !tables.is_empty() {
            let ready = tables
                .iter()
                .position(|t| edges.iter().all(|(child, parent)| child != t || parent == t || !tables.contains(parent)))
                .unwrap_or(0);
            ordered.push(tables.remove(ready));
        }
        let mut rows = Vec::new();
        for (i, table) in ordered.iter().enumerate() {
            let count: i64 = client.query_one(&format!("SELECT count(*) FROM {table}"), &[])?.get(0);
            if count == 0 {
                continue;
            }
            let columns: String = client
                .query_one(
                    "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
                      WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''",
                    &[&table],
                )?
                .get(0);
            let copy = match &place.database {
                Some(_) => format!("{}.seed_{i}", place.schema),
                None => format!("{}.outbox_check_seed_{i}", place.schema),
            };
            client.batch_execute(&format!("CREATE TABLE {copy} AS SELECT {columns} FROM {table}"))?;
            rows.push((table.clone(), columns, copy));
        }
        let sequences = match &place.database {
            Some(_) => client.query(
                "SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences
                  WHERE schemaname NOT IN ('pg_catalog', 'information_schema', $1)",
                &[&place.schema],
            )?,
            None => client.query(
                "SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences
                  WHERE schemaname = $1 AND sequencename NOT LIKE 'outbox\\_check\\_%'",
                &[&place.schema],
            )?,
        }
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        Ok(Seeds { tables: ordered, rows, sequences })
    }

    /// Every user table as the DDL left it.
    fn restore(&self, scratch: &mut super::postgres::Scratch) -> Result<(), StoreError> {
        if self.tables.is_empty() {
            return Ok(());
        }
        let mut sql = format!("TRUNCATE {} CASCADE;", self.tables.join(", "));
        for (sequence, at) in &self.sequences {
            sql.push_str(&match at {
                Some(v) => format!("SELECT setval('{sequence}', {v}, true);"),
                None => format!("ALTER SEQUENCE {sequence} RESTART;"),
            });
        }
        for (table, columns, copy) in &self.rows {
            sql.push_str(&format!(
                "INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {copy};"
            ));
        }
        scratch.client().batch_execute(&sql)?;
        Ok(())
    }
}

/// What in the schema, once its DDL ran, reads the database's real clock where the run's cannot
/// stand in: a column default, a function or a view using a clock that is syntax
/// (`CURRENT_TIMESTAMP`, `'now'`) or named in `pg_catalog`, or a function that sets its own
/// search path around a clock call. One line each. A default counts only on a table a statement
/// or a function of the schema (a trigger's) names: a table the queue's statements never
/// write (River's `river_queue`) adds no clock read to the run.
fn clock_in_schema(
    client: &mut postgres::Client,
    place: &super::postgres::Place,
    statements: &str,
) -> Result<Vec<String>, StoreError> {
    // The user's schemas: in a scratch database all but the system's and the harness's, else
    // the scratch schema.
    let (filter, schemas): (&str, Vec<String>) = match &place.database {
        Some(_) => (
            "NOT (n.nspname = ANY($1))",
            vec!["pg_catalog".into(), "information_schema".into(), "pg_toast".into(), place.schema.clone()],
        ),
        None => ("n.nspname = ANY($1)", vec![place.schema.clone()]),
    };
    let params: [&(dyn postgres::types::ToSql + Sync); 1] = [&schemas];
    let mut problems = Vec::new();
    // The schema's functions, read once: their clock reads are checked below, and their bodies
    // (a trigger's) name tables as statements do.
    let functions: Vec<(String, String, String)> = client
        .query(
            &format!(
                "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid),
                        coalesce(array_to_string(p.proconfig, ' '), '')
                   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                   JOIN pg_language l ON l.oid = p.prolang
                  WHERE {filter} AND l.lanname IN ('sql', 'plpgsql') AND p.prokind IN ('f', 'p')
                    ORDER BY 1"
            ),
            &params,
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let bodies: Vec<String> = functions.iter().map(|(_, body, _)| body.to_ascii_lowercase()).collect();
    let named_text = format!("{} {}", statements.to_ascii_lowercase(), bodies.join(" "));
    let named = |table: &str| {
        named_text.match_indices(table).any(|(i, _)| {
            let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            !word(named_text[..i].chars().next_back()) && !word(named_text[i + table.len()..].chars().next())
        })
    };
    let defaults = client.query(
        &format!(
            "SELECT format('%s.%s', c.relname, a.attname), pg_get_expr(d.adbin, d.adrelid), lower(c.relname),
                    format('ALTER TABLE %I.%I ALTER COLUMN %I SET DEFAULT ', n.nspname, c.relname, a.attname)
               FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
              WHERE {filter} ORDER BY 1"
        ),
        &params,
    )?;
    for row in defaults {
        let (column, expr, table, alter): (String, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        if !named(&table) {
            continue;
        }
        // A default bound to pg_catalog's clock — `now()` written under a migration's own
        // `SET search_path`, where pg_catalog comes first — reads the run's clock instead: the
        // same function, evaluated by the database at insert either way (decision 94).
        let repointed = super::postgres::SHADOWED_CLOCK.iter().fold(expr.clone(), |e, name| {
            e.replace(&format!("pg_catalog.{name}()"), &format!("{}.{name}()", place.schema))
        });
        if let Some(reads) = clock_syntax(&repointed) {
            problems.push(format!("column {column} DEFAULT {expr} reads {reads}"));
        } else if repointed != expr {
            client.batch_execute(&format!("{alter}{repointed}"))?;
        }
    }
    for (name, body, config) in functions {
        if let Some(reads) = clock_syntax(&body) {
            problems.push(format!("function {name} reads {reads}"));
        } else if config.contains("search_path") && reads_the_clock(&body).is_some() {
            problems.push(format!(
                "function {name} sets its own search_path, so its clock call reads the database's real clock"
            ));
        }
    }
    let views = client.query(
        &format!(
            "SELECT format('%s.%s', n.nspname, c.relname), pg_get_viewdef(c.oid)
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind IN ('v', 'm') AND {filter}
                ORDER BY 1"
        ),
        &params,
    )?;
    for row in views {
        let (name, body): (String, String) = (row.get(0), row.get(1));
        if let Some(reads) = clock_syntax(&body) {
            problems.push(format!("view {name} reads {reads}"));
        }
    }
    Ok(problems
        .into_iter()
        .map(|p| format!("{p}: a run must be deterministic, and the run's clock stands in only for now(), clock_timestamp(), statement_timestamp() and transaction_timestamp(), its random numbers only for random() (docs/sql-profile.md, \"Time\")"))
        .collect())
}

impl ProfileStore {
    /// The sweep's moves as its statements name them ([`Profile::sweep_names_its_moves`]): each
    /// row moved, the status it went to and its attempts where returned. A status name several
    /// statuses share reads as the one the design's rescuer moves rows to (PENDING, or where a
    /// budget is spent, [`Policy::rescue_target`]'s). For the concurrent run's history.
    pub(crate) fn rescue_all_moves(
        &mut self,
        now: Instant,
        max_attempts: u32,
        policy: &crate::core::Policy,
    ) -> Result<Vec<(MessageId, Status, u32)>, StoreError> {
        let Some(sql) = self.profile.file.statements.rescue_all.clone() else { return Ok(Vec::new()) };
        let params = self.sweep_params(now, max_attempts);
        let rows = self.run_sweep("rescue_all", &sql, &params)?;
        let spent = policy.rescue_target(max_attempts, max_attempts);
        let names = self.profile.statuses.names();
        let mut moves = Vec::new();
        for row in rows {
            let id = as_int("rescue_all", "message_id", row.get("message_id"))?
                .ok_or_else(|| StoreError::Corrupt("rescue_all: a row it moved without message_id".into()))?;
            let Some(V::Text(name)) = row.get("status") else {
                return Err(StoreError::Corrupt(format!("rescue_all: the row {id} it moved without its status")));
            };
            let shared: Vec<Status> = names.iter().filter(|(n, _)| n == name).map(|(_, s)| *s).collect();
            let to = shared
                .iter()
                .copied()
                .find(|s| *s == Status::Pending || *s == spent)
                .or_else(|| shared.first().copied())
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("rescue_all: status {name:?} is none of the profile's statuses"))
                })?;
            let attempts = as_int("rescue_all", "attempts", row.get("attempts"))?.unwrap_or(0).max(0) as u32;
            moves.push((self.model_id(id), to, attempts));
        }
        moves.sort_by_key(|m| m.0);
        Ok(moves)
    }

    fn open(db: Db, profile: &Profile) -> Result<ProfileStore, StoreError> {
        let mut store = ProfileStore {
            db,
            profile: profile.clone(),
            log: Vec::new(),
            versions: BTreeMap::new(),
            columns: Vec::new(),
            stamp: false,
            last_stamp: 0,
            policy: profile.design.policy(),
            random_issued: 0,
            shared_tokens: None,
            held: false,
            no_row_lock: false,
            clock: None,
            scale: 1,
            budget: 3,
            lease: crate::core::Duration(100),
            not_read: Vec::new(),
            problem: None,
            tenants: BTreeMap::new(),
            last_now: 0,
            assigned: BTreeMap::new(),
        };
        // Every problem of the profile and its statements at once, one line each.
        let mut problems = profile.problems.clone();
        match store.row_columns() {
            Ok(columns) => store.columns = columns,
            Err(e) => problems.push(e.to_string()),
        }
        for p in store.check_statements() {
            if !problems.contains(&p) {
                problems.push(p);
            }
        }
        if !problems.is_empty() {
            return Err(StoreError::Setup(problems.join("\n")));
        }
        Ok(store)
    }
}

/// A row's retry time as the two tables are compared: only where the row waits (PENDING or
/// AMBIGUOUS). Nothing reads it on a row in flight or ended, and the model keeps it where a write
/// by id moved a waiting row on (Oban's `complete_job` on a `retryable` job), as a queue keeps
/// its column (decision 96).
fn waiting_retry(status: Status, at: Option<Instant>) -> Option<Instant> {
    if matches!(status, Status::Pending | Status::Ambiguous) {
        at
    } else {
        None
    }
}

/// The ids a maintenance statement returned (`message_id`), by id.
fn moved_ids(store: &ProfileStore, key: &str, rows: &[BTreeMap<String, V>]) -> Result<Vec<MessageId>, StoreError> {
    let mut ids = Vec::new();
    for row in rows {
        if let Some(id) = as_int(key, "message_id", row.get("message_id"))? {
            ids.push(store.model_id(id));
        }
    }
    ids.sort();
    Ok(ids)
}

/// SQLite's error on one line: its message holds the whole statement, so the line the problem is
/// on instead.
fn sqlite_said(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqlInputError { msg, sql, offset, .. } => {
            let at = usize::try_from(*offset).unwrap_or(0).min(sql.len());
            format!("{msg} (line {})", sql[..at].matches('\n').count() + 1)
        }
        other => other.to_string().replace('\n', " "),
    }
}

/// The schema's DDL: a file, or a migrations directory's .sql files in name order (V1__a.sql,
/// V2__b.sql, or 001_a.sql …), as a migration tool would apply them to a fresh database.
fn read_schema(shown: &str, given: &str, schema_path: &Path) -> Result<Vec<(String, String)>, String> {
    if !schema_path.is_dir() {
        return std::fs::read_to_string(schema_path)
            .map(|sql| vec![(given.to_string(), sql)])
            .map_err(|e| format!("{shown}: schema = {given:?}: cannot read {}: {e}", schema_path.display()));
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(schema_path)
        .map_err(|e| format!("{shown}: schema = {given:?}: cannot read {}: {e}", schema_path.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort_by_key(|p| migration_order(p));
    if files.is_empty() {
        return Err(format!("{shown}: schema = {given:?}: the directory holds no .sql file"));
    }
    let mut all = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).map_err(|e| format!("{shown}: schema: cannot read {}: {e}", f.display()))?;
        let name = f.file_name().map_or(String::new(), |n| format!("{given}/{}", n.to_string_lossy()));
        all.push((name, text));
    }
    Ok(all)
}

/// A migration file's place in the order: its leading version number (`V12__x.sql`, `012_x.sql`),
/// then its name.
fn migration_order(path: &Path) -> (u64, String) {
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let digits: String = name.trim_start_matches(['V', 'v']).chars().take_while(|c| c.is_ascii_digit()).collect();
    (digits.parse().unwrap_or(u64::MAX), name)
}

/// A field's column in `[columns]`: one name, or the names results give it.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum ColumnNames {
    One(String),
    Several(Vec<String>),
}

impl ColumnNames {
    pub fn names(&self) -> &[String] {
        match self {
            ColumnNames::One(one) => std::slice::from_ref(one),
            ColumnNames::Several(several) => several,
        }
    }
}

/// A returned column's name as the queue's code reads it: sqlx's overrides in an alias
/// (`"id: TaskId"`, `"attempt_number!"`, `"count?: i64"`) name the column before them.
fn column_name(raw: &str) -> String {
    let name = raw.split_once(':').map_or(raw, |(name, _)| name).trim_end();
    name.trim_end_matches(['!', '?']).to_string()
}

/// The named parameters each statement may use.
pub const PARAMETERS: [(&str, &[&str]); 14] = [
    ("enqueue", &["id", "tenant", "aggregate", "version", "now", "run_at", "max_attempts", "lease_ms", "lease_s"]),
    ("claim", &["now", "owner", "tenant", "batch", "lease_ms", "lease_s", "lease_until", "max_attempts", "token"]),
    ("mark_published", WRITE_PARAMETERS),
    ("mark_ambiguous", WRITE_PARAMETERS),
    ("mark_retry", WRITE_PARAMETERS),
    ("mark_failed", WRITE_PARAMETERS),
    ("mark_exhausted", WRITE_PARAMETERS),
    ("reap", &["now", "max_attempts", "lease_ms"]),
    ("rescue_read", &["now", "lease_ms", "horizon"]),
    ("rescue", RESCUE_PARAMETERS),
    ("rescue_exhausted", RESCUE_PARAMETERS),
    ("rescue_all", &["now", "max_attempts", "lease_ms", "horizon"]),
    ("schedule", &["now", "lease_ms"]),
    // The time of the last statement: a status derived from the clock (`vt > :now`).
    ("rows", &["now"]),
];

const RESCUE_PARAMETERS: &[&str] =
    &["id", "ids", "tenant", "token", "now", "max_attempts", "lease_ms", "horizon", "retry_at"];

const WRITE_PARAMETERS: &[&str] = &[
    "id",
    "ids",
    "tenant",
    "owner",
    "token",
    "attempts",
    "now",
    "code",
    "retry_at",
    "retry_in",
    "retry_in_s",
    "backoff_base_ms",
    "backoff_cap_ms",
    "max_attempts",
];

/// Sets the run's clock to `$1` milliseconds after [`super::postgres::CLOCK_BASE`].
const SET_CLOCK: &str = "SELECT set_config('outbox_check.now', \
     (timestamptz '2000-01-01 00:00:00+00' + $1::bigint * interval '1 millisecond')::text, false)";

/// The database a profile's statements run on.
enum Db {
    Sqlite(rusqlite::Connection),
    /// One scratch schema for the whole sweep, emptied between cases.
    Postgres(std::rc::Rc<std::cell::RefCell<super::postgres::Scratch>>),
}

/// The user's statements on SQLite or PostgreSQL.
pub struct ProfileStore {
    db: Db,
    profile: Profile,
    log: Vec<String>,
    /// The application's aggregate versions (the business table is the application's, not the
    /// outbox's: the harness keeps it, so a stale enqueue is refused before any statement).
    versions: BTreeMap<(u16, u32), u32>,
    /// The columns the rows SELECT gives.
    columns: Vec<String>,
    /// Stamp every statement in its own transaction with the next value of the scratch
    /// schema's `outbox_check_order` sequence (the concurrent run's commit order).
    stamp: bool,
    pub last_stamp: i64,
    /// The design's switches with a run's own backoff (the concurrent run's short retries).
    policy: Policy,
    /// Random tokens handed to claims so far (designs with random tokens: the core's sequence).
    random_issued: u64,
    /// The concurrent run's relays draw from one sequence, so no two claims share a token.
    shared_tokens: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// An observed write of the concurrent run is under way: its statement and the reads that
    /// observe it share one transaction, stamped once at its end.
    held: bool,
    /// The rows SELECT cannot be locked (`FOR UPDATE` refused on it): observed writes read the
    /// row before their statement without locking it.
    no_row_lock: bool,
    /// The run's clock as last set on the connection (PostgreSQL): `now()` reads it.
    clock: Option<i64>,
    /// The queue's milliseconds per model millisecond (docs/sql-profile.md, "Time").
    scale: u64,
    /// The run's budget, for an enqueue that takes `:max_attempts`.
    budget: u32,
    /// The run's lease, in the model's milliseconds.
    lease: crate::core::Duration,
    /// Columns of the rows SELECT that are no model field: not read.
    not_read: Vec<String>,
    /// The first problem of the profile a statement met while running.
    problem: Option<String>,
    /// The tenant each message was enqueued for: a lease's tenant where the table keeps none.
    tenants: BTreeMap<MessageId, TenantId>,
    /// The time of the last statement that had one: the rows SELECT's `:now`.
    last_now: u64,
    /// The id the table gave each message the run enqueued, where the enqueue returns one
    /// (a sequence's: River takes id 0 as "none", pgmq and Oban never take the run's).
    assigned: BTreeMap<MessageId, i64>,
}

/// A value bound to a parameter or read from a column.
#[derive(Clone, Debug, PartialEq)]
enum V {
    Null,
    Int(i64),
    Text(String),
    /// A time, in the model's milliseconds: bound as the parameter's type wants it (a
    /// timestamp, or milliseconds times the profile's time scale).
    Time(u64),
    /// A duration, in the model's milliseconds: an interval, or scaled milliseconds.
    Span(u64),
    /// A column of a type no model field is read from (jsonb, an array …): ignored unless the
    /// profile maps it, then one line naming it.
    Other(String),
    /// A boolean constant of `[parameters]` (River's `@errors_do_update`).
    Bool(bool),
    /// A date-time constant of `[parameters]`: microseconds since 2000-01-01 UTC, never scaled
    /// (Go's zero time, which River passes for "not set").
    At(i64),
    /// The rescuer's horizon, in the model's milliseconds: as a timestamp, a microsecond after
    /// it, so a claim made exactly a lease ago is expired whether the statement compares with
    /// `<` (River's `attempted_at < @stuck_horizon`) or `<=` — the model's expiry is inclusive,
    /// and its times are whole ticks (decision 92). As an integer, the time itself.
    Horizon(u64),
    /// A duration, in the model's milliseconds, that the queue takes in whole seconds (pgmq's
    /// `vt => integer`): `:lease_s`, `:retry_in_s`.
    Seconds(u64),
    /// A float constant of `[parameters]`.
    Float(f64),
    /// An array constant of `[parameters]`: a composite value's fields, or an array's elements.
    List(Vec<V>),
}

/// The run's values for a statement, by the run's names.
type Params = Vec<(&'static str, V)>;
/// A statement's values by the names it uses: the run's, and those `[parameters]` gives.
type Values = Vec<(String, V)>;
type Answer = (Vec<BTreeMap<String, V>>, usize);

fn int(v: impl Into<i64>) -> V {
    V::Int(v.into())
}
fn time(at: Instant) -> V {
    V::Time(at.0)
}
fn span(d: crate::core::Duration) -> V {
    V::Span(d.0)
}
fn text(v: &str) -> V {
    V::Text(v.to_string())
}

/// A parameter as the statement writes it: `:now`, or a positional `$1`.
fn shown_param(name: &str) -> String {
    if name.starts_with('$') {
        name.to_string()
    } else {
        format!(":{name}")
    }
}

/// A parameter's name as a key of `[parameters]`: `"$1"` quoted.
fn toml_key(name: &str) -> String {
    if name.starts_with('$') {
        format!("{name:?}")
    } else {
        name.to_string()
    }
}

/// The named parameters of a statement (`:now`), where they are: outside string literals and
/// quoted names, and not a PostgreSQL cast (`::bigint`).
fn named_params(sql: &str) -> Vec<(usize, usize, &str)> {
    let bytes = sql.as_bytes();
    let mut found = Vec::new();
    let (mut i, mut quote) = (0, None::<u8>);
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'\'' || c == b'"' => quote = Some(c),
            None if c == b'-' && bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            None if c == b':' && bytes.get(i + 1) == Some(&b':') => i += 1,
            // A positional parameter as a client library writes it (`$1`, pgmq's Rust client):
            // named `$1`, given in [parameters].
            None if c == b'$'
                && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                found.push((start, i, &sql[start..i]));
                continue;
            }
            None if c == b':' && bytes.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_') => {
                let start = i;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                found.push((start, i, &sql[start + 1..i]));
                continue;
            }
            None => {}
        }
        i += 1;
    }
    found
}

/// The statement with `values` written in for its parameters: the log a person pastes. `shown`
/// holds a value as the server's type for it renders it (a timestamp), where known.
fn written_in(sql: &str, values: &Values, shown: &[(String, String)], scale: u64) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end, name) in named_params(sql) {
        out.push_str(&sql[at..start]);
        match (shown.iter().find(|(n, _)| n == name), values.iter().find(|(n, _)| *n == name)) {
            (Some((_, text)), _) => out.push_str(text),
            (None, Some((_, v))) => out.push_str(&render(v, scale)),
            (None, None) => out.push_str(&sql[start..end]),
        }
        at = end;
    }
    out.push_str(&sql[at..]);
    format!("{};", out.trim().trim_end_matches(';'))
}

/// The statement in PostgreSQL's positional form (`$1`), and the name of each position.
fn positional(sql: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut at = 0;
    for (start, end, name) in named_params(sql) {
        out.push_str(&sql[at..start]);
        let n = match names.iter().position(|x| x == name) {
            Some(i) => i + 1,
            None => {
                names.push(name.to_string());
                names.len()
            }
        };
        out.push_str(&format!("${n}"));
        at = end;
    }
    out.push_str(&sql[at..]);
    (out, names)
}

/// A value as PostgreSQL takes it in binary, chosen by the type the server gave the parameter.
#[derive(Debug)]
enum Bound {
    Null,
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float8(f64),
    /// Text, and an enum's label (an enum's binary form is its label).
    Text(String),
    Uuid(u128),
    /// A timestamp: microseconds since 2000-01-01 (with or without a time zone alike).
    Micros(i64),
    /// An interval of microseconds.
    Interval(i64),
    Bool(bool),
    /// Bytes as they are: `bytea`, and `json` (whose binary form is its text).
    Bytes(Vec<u8>),
    /// `jsonb`: its binary form is a version byte, then the text.
    Jsonb(String),
    /// An array of the element type: a one-element array of a single value (sqlc's
    /// `@ids::bigint[]`, River's `…Many` statements: the value the statement gets, for its one
    /// row), or the elements of an array constant.
    Array(postgres::types::Type, Vec<Bound>),
    Float4(f32),
    /// A composite value's fields, each with its type (underway's `retry_policy`).
    Composite(Vec<(postgres::types::Type, Bound)>),
}

impl postgres::types::ToSql for Bound {
    fn to_sql(
        &self,
        _: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        match self {
            Bound::Null => return Ok(postgres::types::IsNull::Yes),
            Bound::Int2(v) => out.put_i16(*v),
            Bound::Int4(v) => out.put_i32(*v),
            Bound::Int8(v) | Bound::Micros(v) => out.put_i64(*v),
            Bound::Float8(v) => out.put_f64(*v),
            Bound::Text(t) => out.extend_from_slice(t.as_bytes()),
            Bound::Uuid(u) => out.extend_from_slice(&u.to_be_bytes()),
            Bound::Bool(b) => out.put_u8(u8::from(*b)),
            Bound::Bytes(b) => out.extend_from_slice(b),
            Bound::Jsonb(t) => {
                out.put_u8(1);
                out.extend_from_slice(t.as_bytes());
            }
            Bound::Interval(micros) => {
                out.put_i64(*micros);
                out.put_i32(0);
                out.put_i32(0);
            }
            Bound::Float4(v) => out.put_f32(*v),
            Bound::Array(element, items) => {
                let mut encoded = Vec::with_capacity(items.len());
                for item in items {
                    let mut inner = bytes::BytesMut::new();
                    let null = item.to_sql(element, &mut inner)?;
                    encoded.push(matches!(null, postgres::types::IsNull::No).then_some(inner));
                }
                out.put_i32(1);
                out.put_i32(i32::from(encoded.iter().any(Option::is_none)));
                out.put_u32(element.oid());
                out.put_i32(encoded.len() as i32);
                out.put_i32(1);
                for item in encoded {
                    put_field(out, item);
                }
            }
            Bound::Composite(fields) => {
                out.put_i32(fields.len() as i32);
                for (ty, field) in fields {
                    let mut inner = bytes::BytesMut::new();
                    let null = field.to_sql(ty, &mut inner)?;
                    out.put_u32(ty.oid());
                    put_field(out, matches!(null, postgres::types::IsNull::No).then_some(inner));
                }
            }
        }
        Ok(postgres::types::IsNull::No)
    }
    /// The value was chosen for the parameter's type.
    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }
    postgres::types::to_sql_checked!();
}

/// One element of an array or field of a composite in binary: its length and bytes, or -1 for
/// NULL.
fn put_field(out: &mut bytes::BytesMut, value: Option<bytes::BytesMut>) {
    use bytes::BufMut;
    match value {
        None => out.put_i32(-1),
        Some(inner) => {
            out.put_i32(inner.len() as i32);
            out.extend_from_slice(&inner);
        }
    }
}

/// A duration constant of `[parameters]` bound to an `interval` ("15m", "0s"): microseconds of
/// the queue's own time, never scaled.
fn constant_interval(text: &str) -> Option<i64> {
    let t = text.trim();
    let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    if !digits.is_empty() && digits.chars().all(|c| c == '0') {
        // A zero length in a unit parse_millis knows.
        return parse_millis(&format!("1{}", &t[digits.len()..])).ok().map(|_| 0);
    }
    parse_millis(t).ok().map(|ms| ms as i64 * 1000)
}

/// Milliseconds of the model as the queue's: times the profile's time scale.
fn scaled(ms: u64, scale: u64) -> i64 {
    ms.saturating_mul(scale).min(i64::MAX as u64 / 1000) as i64
}

fn pg_value(key: &str, name: &str, ty: &postgres::types::Type, v: &V, scale: u64) -> Result<Bound, StoreError> {
    use postgres::types::{Kind, Type};
    let bad = || {
        let what = match v {
            V::Time(_) | V::At(_) | V::Horizon(_) => "a time",
            V::Span(_) | V::Seconds(_) => "a duration",
            V::Text(_) => "text",
            V::Bool(_) => "a boolean",
            V::Float(_) => "a number",
            V::List(_) => "an array",
            _ => "an integer",
        };
        StoreError::Setup(format!(
            "statements.{key}: parameter :{name} is {what}, and the server types it {ty}; cast it (:{name}::bigint, :{name}::text, :{name}::timestamptz)"
        ))
    };
    if *v == V::Null {
        return Ok(Bound::Null);
    }
    if let Kind::Array(element) = ty.kind() {
        let items = match v {
            V::List(items) => items.iter().map(|i| pg_value(key, name, element, i, scale)).collect::<Result<_, _>>()?,
            one => vec![pg_value(key, name, element, one, scale)?],
        };
        return Ok(Bound::Array(element.clone(), items));
    }
    if let Kind::Composite(fields) = ty.kind() {
        let V::List(items) = v else { return Err(bad()) };
        if items.len() != fields.len() {
            return Err(StoreError::Setup(format!(
                "statements.{key}: parameter {} is the composite {ty} of {} fields, and [parameters] gives {}",
                shown_param(name),
                fields.len(),
                items.len()
            )));
        }
        let mut bound = Vec::with_capacity(items.len());
        for (field, item) in fields.iter().zip(items) {
            bound.push((field.type_().clone(), pg_value(key, name, field.type_(), item, scale)?));
        }
        return Ok(Bound::Composite(bound));
    }
    if let Kind::Enum(labels) = ty.kind() {
        return match v {
            V::Text(t) if labels.contains(t) => Ok(Bound::Text(t.clone())),
            V::Text(t) => Err(StoreError::Setup(format!(
                "statements.{key}: parameter :{name} is '{t}', which the enum {ty} has no label for (it has {})",
                labels.join(", ")
            ))),
            _ => Err(bad()),
        };
    }
    if let Kind::Domain(base) = ty.kind() {
        return pg_value(key, name, base, v, scale);
    }
    let number = match v {
        V::Int(i) => Some(*i),
        V::Time(ms) | V::Span(ms) | V::Horizon(ms) => Some(scaled(*ms, scale)),
        V::Seconds(ms) => Some(scaled(*ms, scale) / 1000),
        _ => None,
    };
    Ok(match (ty, v) {
        (&Type::INT2, _) if number.is_some() => Bound::Int2(number.unwrap_or(0) as i16),
        (&Type::INT4, _) if number.is_some() => Bound::Int4(number.unwrap_or(0) as i32),
        (&Type::INT8, _) if number.is_some() => Bound::Int8(number.unwrap_or(0)),
        (&Type::FLOAT8, _) if number.is_some() => Bound::Float8(number.unwrap_or(0) as f64),
        (&Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME, V::Text(t)) => Bound::Text(t.clone()),
        (&Type::TEXT | &Type::VARCHAR | &Type::BPCHAR | &Type::NAME, _) if number.is_some() => {
            Bound::Text(number.unwrap_or(0).to_string())
        }
        (&Type::UUID, V::Text(t)) => Bound::Uuid(parse_uuid(t).ok_or_else(bad)?),
        // An integer id in a uuid column: the uuid whose low bits are the id.
        (&Type::UUID, V::Int(i)) => Bound::Uuid(*i as u64 as u128),
        (&Type::TIMESTAMPTZ | &Type::TIMESTAMP, V::Time(ms)) => Bound::Micros(scaled(*ms, scale) * 1000),
        (&Type::TIMESTAMPTZ | &Type::TIMESTAMP, V::At(micros)) => Bound::Micros(*micros),
        (&Type::TIMESTAMPTZ | &Type::TIMESTAMP, V::Horizon(ms)) => Bound::Micros(scaled(*ms, scale) * 1000 + 1),
        (&Type::BOOL, V::Bool(b)) => Bound::Bool(*b),
        (&Type::FLOAT8, V::Float(f)) => Bound::Float8(*f),
        (&Type::FLOAT4, V::Float(f)) => Bound::Float4(*f as f32),
        (&Type::FLOAT4, _) if number.is_some() => Bound::Float4(number.unwrap_or(0) as f32),
        (&Type::INTERVAL, V::Text(t)) => Bound::Interval(constant_interval(t).ok_or_else(bad)?),
        (&Type::JSONB, V::Text(t)) => Bound::Jsonb(t.clone()),
        (&Type::JSON | &Type::BYTEA, V::Text(t)) => Bound::Bytes(t.as_bytes().to_vec()),
        (&Type::INTERVAL, V::Span(ms)) => Bound::Interval(scaled(*ms, scale) * 1000),
        _ => return Err(bad()),
    })
}

/// A timestamp or interval column as it comes: microseconds (an interval's days and months as
/// 24 h and 30 days, PostgreSQL's own justification).
struct RawTime(i64);

impl<'a> postgres::types::FromSql<'a> for RawTime {
    fn from_sql(
        ty: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<RawTime, Box<dyn std::error::Error + Sync + Send>> {
        let int = |at: usize, n: usize| -> Result<i64, Box<dyn std::error::Error + Sync + Send>> {
            let bytes = raw.get(at..at + n).ok_or("a short time value")?;
            Ok(match n {
                8 => i64::from_be_bytes(bytes.try_into()?),
                _ => i64::from(i32::from_be_bytes(bytes.try_into()?)),
            })
        };
        Ok(RawTime(match *ty {
            postgres::types::Type::INTERVAL => {
                int(0, 8)? + int(8, 4)? * 86_400_000_000 + int(12, 4)? * 30 * 86_400_000_000
            }
            _ => int(0, 8)?,
        }))
    }
    fn accepts(ty: &postgres::types::Type) -> bool {
        matches!(
            *ty,
            postgres::types::Type::TIMESTAMPTZ | postgres::types::Type::TIMESTAMP | postgres::types::Type::INTERVAL
        )
    }
}

/// An enum's label as it comes.
struct Label(String);

impl<'a> postgres::types::FromSql<'a> for Label {
    fn from_sql(_: &postgres::types::Type, raw: &'a [u8]) -> Result<Label, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Label(std::str::from_utf8(raw)?.to_string()))
    }
    fn accepts(ty: &postgres::types::Type) -> bool {
        matches!(ty.kind(), postgres::types::Kind::Enum(_))
    }
}

fn pg_cell(row: &postgres::Row, i: usize, scale: u64) -> Result<V, StoreError> {
    use postgres::types::{Kind, Type};
    let column = &row.columns()[i];
    let get_err = |e: postgres::Error| StoreError::Postgres(e.to_string());
    // The model's milliseconds from the queue's microseconds (before 2000-01-01: 0).
    // Rounded up: a time between two of the run's (a delay the queue computed in its own
    // units) is first reached at the later one.
    let model = |micros: i64| (micros.max(0) as u64).div_ceil(1000 * scale.max(1));
    Ok(match *column.type_() {
        Type::INT2 => row.try_get::<_, Option<i16>>(i).map_err(get_err)?.map_or(V::Null, |v| V::Int(v.into())),
        Type::INT4 => row.try_get::<_, Option<i32>>(i).map_err(get_err)?.map_or(V::Null, |v| V::Int(v.into())),
        Type::INT8 => row.try_get::<_, Option<i64>>(i).map_err(get_err)?.map_or(V::Null, V::Int),
        Type::BOOL => row.try_get::<_, Option<bool>>(i).map_err(get_err)?.map_or(V::Null, |b| V::Int(b.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, Option<String>>(i).map_err(get_err)?.map_or(V::Null, V::Text)
        }
        Type::UUID => row.try_get::<_, Option<Uuid>>(i).map_err(get_err)?.map_or(V::Null, |u| V::Text(uuid_text(u.0))),
        Type::TIMESTAMPTZ | Type::TIMESTAMP => {
            row.try_get::<_, Option<RawTime>>(i).map_err(get_err)?.map_or(V::Null, |t| V::Time(model(t.0)))
        }
        Type::INTERVAL => {
            row.try_get::<_, Option<RawTime>>(i).map_err(get_err)?.map_or(V::Null, |t| V::Span(model(t.0)))
        }
        ref other if matches!(other.kind(), Kind::Enum(_)) => {
            row.try_get::<_, Option<Label>>(i).map_err(get_err)?.map_or(V::Null, |l| V::Text(l.0))
        }
        ref other => V::Other(other.to_string()),
    })
}

/// A uuid column's 16 bytes, as PostgreSQL sends them: a random token written into a `uuid`
/// column (seed 003's `lease_token`) without a crate for the one type.
#[derive(Debug)]
struct Uuid(u128);

impl<'a> postgres::types::FromSql<'a> for Uuid {
    fn from_sql(_: &postgres::types::Type, raw: &'a [u8]) -> Result<Uuid, Box<dyn std::error::Error + Sync + Send>> {
        let bytes: [u8; 16] = raw.try_into().map_err(|_| "a uuid is 16 bytes")?;
        Ok(Uuid(u128::from_be_bytes(bytes)))
    }
    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::UUID
    }
}

/// A random token as a profile binds it: uuid-shaped text (its low 64 bits the core's token), so
/// it fits a `uuid` column as well as a text one.
fn uuid_text(value: u128) -> String {
    let h = format!("{value:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

fn parse_uuid(text: &str) -> Option<u128> {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32).then(|| u128::from_str_radix(&hex, 16).ok()).flatten()
}

/// A lease token as the table gives it back: an integer (a counter), or for designs with random
/// tokens the uuid-shaped text the claim was given.
fn token_of(key: &str, random: bool, v: Option<&V>) -> Result<u64, StoreError> {
    match v {
        Some(V::Text(t)) if random => parse_uuid(t)
            .map(|u| u as u64)
            .ok_or_else(|| StoreError::Corrupt(format!("{key}: lease_token '{t}' is not the token a claim was given"))),
        other => Ok(as_int(key, "lease_token", other)?.unwrap_or(0) as u64),
    }
}

impl ProfileStore {
    /// The run's lease, and with the profile's `[time] lease` the scale that maps it onto the
    /// queue's: one model millisecond is `time.lease / lease` of the queue's.
    fn set_lease(&mut self, lease: crate::core::Duration) {
        self.lease = lease;
        self.scale = match &self.profile.file.time {
            Some(t) => (t.lease.0 / lease.0.max(1)).max(1),
            None => 1,
        };
        self.policy.backoff.unit = self.backoff_unit();
        self.clock = None;
    }

    /// Whether the table keeps a lease token (the rows SELECT maps `lease_token`).
    pub(crate) fn keeps_tokens(&self) -> bool {
        self.columns.iter().any(|c| c == "lease_token")
    }

    /// The rescuer's horizon at `now`: a lease ago, where the lease began that ends now.
    fn horizon(&self, now: Instant) -> Instant {
        Instant(now.0.saturating_sub(self.lease.0))
    }

    /// The table's id of a message the run enqueued.
    fn table_id(&self, message: MessageId) -> i64 {
        self.assigned.get(&message).copied().unwrap_or(i64::from(message.0))
    }

    /// The run's message a table id is: the one the table gave it, else the id itself.
    fn model_id(&self, id: i64) -> MessageId {
        self.assigned.iter().find(|(_, t)| **t == id).map_or(MessageId(id as u32), |(m, _)| *m)
    }

    /// The design draws random tokens (bound and read back uuid-shaped).
    fn random_tokens(&self) -> bool {
        self.policy.token_kind == crate::core::policy::TokenKind::Random
    }

    /// A lease's token as a statement binds it.
    fn token_param(&self, token: LeaseToken) -> V {
        if self.random_tokens() {
            V::Text(uuid_text(u128::from(token.0)))
        } else {
            int(token.0 as i64)
        }
    }

    /// Runs a statement that ends a lease (a terminal write, the rescuer's move) and observes
    /// whether it applied as `observe.<key>` says; applied, the row's status as the rows SELECT
    /// reads it (gone: `gone_as`, the status the design's deletion leaves, where it deletes). The statement's own stamp is
    /// kept, not that of reading rows around it.
    fn run_observed(
        &mut self,
        key: &'static str,
        sql: &str,
        params: &Params,
        id: MessageId,
        gone_as: Option<Status>,
    ) -> Result<WriteResult, StoreError> {
        let observe = self.profile.file.observe.get(key).copied().unwrap_or_default();
        // In the concurrent run another relay may change the row between the statement and
        // the reads that observe it; one transaction, the row locked first where the outcome
        // is read from the row before and after, keeps what is observed the statement's own.
        let held = self.hold(observe != Observe::RowsAffected && observe != Observe::Returning, id)?;
        let observed = self.observe_write(key, sql, params, id, gone_as, observe);
        if held {
            let ended = self.end_hold(observed.is_ok());
            let result = observed?;
            ended?;
            Ok(result)
        } else {
            observed
        }
    }

    fn observe_write(
        &mut self,
        key: &'static str,
        sql: &str,
        params: &Params,
        id: MessageId,
        gone_as: Option<Status>,
        observe: Observe,
    ) -> Result<WriteResult, StoreError> {
        let version_before = if observe == Observe::RowVersion { Some(self.row_version(id)?) } else { None };
        let row_before = if observe == Observe::RowChanged {
            Some(self.rows()?.into_iter().find(|r| r.message_id == id))
        } else {
            None
        };
        let there_before = observe != Observe::RowGone || self.rows()?.iter().any(|r| r.message_id == id);
        let (returned, changed) = self.run_parts(key, sql, params)?;
        let stamp = self.last_stamp;
        let after = self.rows()?.into_iter().find(|r| r.message_id == id);
        let applied = match observe {
            Observe::RowsAffected => changed > 0,
            Observe::Returning => !returned.is_empty(),
            Observe::RowGone => there_before && after.is_none(),
            Observe::RowVersion => version_before != Some(self.row_version(id)?),
            Observe::RowChanged => row_before.is_some_and(|before| before != after),
        };
        self.last_stamp = stamp;
        if !applied {
            return Ok(WriteResult::Stale { reason: crate::core::StaleReason::WrongToken });
        }
        let status = match after {
            Some(row) => row.status,
            // Completion (or failure) by deletion: the row is gone, as the model keeps it.
            None if gone_as.is_some() => gone_as.unwrap_or(Status::Published),
            None => {
                return Err(StoreError::Corrupt(format!("{key} applied, and the rows SELECT no longer shows {id}")))
            }
        };
        Ok(WriteResult::Applied { status })
    }

    /// Opens the transaction of an observed write in the concurrent run (PostgreSQL), locking
    /// the row `id` through the rows SELECT where `lock`; false where there is none to open.
    fn hold(&mut self, lock: bool, id: MessageId) -> Result<bool, StoreError> {
        let Db::Postgres(scratch) = &self.db else { return Ok(false) };
        if !self.stamp {
            return Ok(false);
        }
        let scratch = scratch.clone();
        scratch.borrow_mut().client().batch_execute("BEGIN")?;
        self.held = true;
        if lock && !self.no_row_lock {
            let rows = self.profile.file.statements.rows.clone();
            let sql = format!(
                "SELECT * FROM ({}) AS outbox_check_row WHERE message_id = {} FOR UPDATE",
                rows.trim().trim_end_matches(';'),
                self.table_id(id)
            );
            if scratch.borrow_mut().client().batch_execute(&sql).is_err() {
                // Refused (an outer join, an aggregate): read unlocked from now on.
                self.no_row_lock = true;
                scratch.borrow_mut().client().batch_execute("ROLLBACK; BEGIN")?;
            }
        }
        Ok(true)
    }

    /// Ends the transaction [`ProfileStore::hold`] opened: stamped and committed, or rolled back.
    fn end_hold(&mut self, commit: bool) -> Result<(), StoreError> {
        self.held = false;
        let Db::Postgres(scratch) = &self.db else { return Ok(()) };
        let mut scratch = scratch.borrow_mut();
        let client = scratch.client();
        if commit {
            self.last_stamp = client.query_one(super::postgres::COMMIT_STAMP, &[])?.get(0);
            client.batch_execute("COMMIT")?;
        } else {
            client.batch_execute("ROLLBACK")?;
            // The clock set inside it went with it.
            self.clock = None;
        }
        Ok(())
    }

    /// The `row_version` the rows SELECT gives for `id` (`None` once the row is gone).
    fn row_version(&mut self, id: MessageId) -> Result<Option<V>, StoreError> {
        let sql = self.profile.file.statements.rows.clone();
        let (rows, _) = self.run_quietly("rows", &sql)?;
        for row in rows {
            if as_int("rows", "message_id", row.get("message_id"))? == Some(self.table_id(id)) {
                return Ok(row.get("row_version").cloned());
            }
        }
        Ok(None)
    }

    /// The column names a statement returns.
    fn columns_of(&mut self, key: &str, sql: &str) -> Result<Vec<String>, StoreError> {
        let setup = |e: String| StoreError::Setup(format!("statements.{key}: {e}"));
        match &mut self.db {
            Db::Sqlite(conn) => {
                let stmt = conn.prepare(sql).map_err(|e| setup(sqlite_said(&e)))?;
                Ok(stmt.column_names().into_iter().map(column_name).collect())
            }
            Db::Postgres(scratch) => {
                let (pg, _) = positional(sql);
                let stmt = scratch.borrow_mut().client().prepare(&pg).map_err(|e| setup(super::bind::one_line(&e)))?;
                Ok(stmt.columns().iter().map(|c| column_name(c.name())).collect())
            }
        }
    }

    /// The model's fields the rows SELECT gives: its columns of the model's names and those the
    /// profile's `[columns]` maps; any other column is not read.
    fn row_columns(&mut self) -> Result<Vec<String>, StoreError> {
        let sql = self.profile.file.statements.rows.clone();
        let given = self.columns_of("rows", &sql)?;
        let mapped: Vec<&String> = self.profile.file.columns.values().flat_map(|c| c.names()).collect();
        self.not_read =
            given.iter().filter(|c| !COLUMNS.contains(&c.as_str()) && !mapped.contains(c)).cloned().collect();
        let mut names: Vec<String> = given.iter().filter(|n| COLUMNS.contains(&n.as_str())).cloned().collect();
        for (field, columns) in &self.profile.file.columns {
            if columns.names().iter().any(|c| given.contains(c)) && !names.contains(field) {
                names.push(field.clone());
            }
        }
        for required in ["message_id", "status"] {
            if !names.iter().any(|n| n == required) {
                return Err(StoreError::Setup(format!(
                    "statements.rows gives no {required} column (it gives {}; alias one, or map it in [columns])",
                    given.join(", ")
                )));
            }
        }
        if let Some((key, _)) = self.profile.file.observe.iter().find(|(_, o)| **o == Observe::RowVersion) {
            if !names.iter().any(|n| n == "row_version") {
                return Err(StoreError::Setup(format!(
                    "observe.{key} = \"row-version\", and statements.rows gives no row_version column"
                )));
            }
        }
        Ok(names)
    }

    /// Every statement prepares on the schema and names only parameters it gets: found before
    /// the first case, as a problem of the profile (exit 2), not as a divergence.
    fn check_statements(&mut self) -> Vec<String> {
        let s = self.profile.file.statements.clone();
        let mut problems = Vec::new();
        let in_database = match &self.db {
            Db::Postgres(scratch) => scratch.borrow().place().database.is_some(),
            Db::Sqlite(_) => false,
        };
        // A write given as a list is checked statement by statement (`mark_retry.2`).
        let each: Vec<(String, &'static str, &str)> = s
            .each()
            .into_iter()
            .filter_map(|(base, sql)| sql.map(|sql| (base, sql.as_str())))
            .flat_map(|(base, sql)| {
                let several = parts(sql);
                if several.len() == 1 {
                    vec![(base.to_string(), base, sql)]
                } else {
                    several.into_iter().enumerate().map(|(n, part)| (format!("{base}.{}", n + 1), base, part)).collect()
                }
            })
            .collect();
        for (key, base, sql) in &each {
            let (key, base, sql) = (key.as_str(), *base, *sql);
            // On PostgreSQL the run's clock stands in for the clock functions; on SQLite
            // nothing does.
            let (reads, shadowed) = match &self.db {
                Db::Sqlite(_) => (reads_the_clock(sql), false),
                Db::Postgres(_) => (clock_syntax(sql), true),
            };
            if let Some(reads) = reads {
                let instead = if shadowed { "now() or :now" } else { ":now" };
                problems.push(format!(
                    "statements.{key} reads {reads}: a run must be deterministic, so time comes in as {instead} (docs/sql-profile.md, \"Time\")"
                ));
                continue;
            }
            let outside = if in_database {
                sql.to_ascii_lowercase().contains("search_path").then(|| {
                    "sets the search path: statements run on the run's own, which puts its clock ahead of pg_catalog".to_string()
                })
            } else {
                leaves_the_schema(sql)
            };
            if let Some(outside) = outside {
                problems.push(format!("statements.{key}: {outside}"));
                continue;
            }
            if let Err(e) = self.columns_of(key, sql) {
                problems.push(e.to_string());
                continue;
            }
            let allowed = PARAMETERS.iter().find(|(k, _)| *k == base).map_or(&[][..], |(_, p)| p);
            let mut seen: Vec<&str> = Vec::new();
            for (_, _, name) in named_params(sql) {
                if seen.contains(&name) {
                    continue;
                }
                seen.push(name);
                let reached: Vec<(&str, String)> = match self.profile.parameters.given(key, name) {
                    Some(given) => given
                        .ours()
                        .into_iter()
                        .map(|mapped| (mapped, format!(" (given by [parameters] {} = \":{mapped}\")", toml_key(name))))
                        .collect(),
                    None => vec![(name, String::new())],
                };
                for (ours, through) in reached {
                    if base == "claim" && ours == "token" && !self.random_tokens() {
                        problems.push(format!(
                            "statements.claim: parameter :token{through} is a fresh random token, given only where the design's claim.token is \"random\""
                        ));
                    } else if !allowed.contains(&ours) {
                        let known: Vec<String> = allowed.iter().map(|p| format!(":{p}")).collect();
                        let gets = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                        problems.push(format!(
                            "statements.{key}: parameter {}{through} is not one this statement gets (it gets {gets}; a queue's own name goes in [parameters], as {} = \":batch\" or a constant)",
                            shown_param(ours),
                            toml_key(name)
                        ));
                    }
                }
            }
        }
        // A name of [parameters] no statement uses is misspelt, or for another statement.
        for (statement, name) in self.profile.parameters.names() {
            let used = each.iter().any(|(key, base, sql)| {
                statement.is_none_or(|k| k == key || k == *base) && named_params(sql).iter().any(|p| p.2 == name)
            });
            if !used {
                problems.push(match statement {
                    // `[parameters.mark_retry.5]` for a write of fewer statements.
                    Some(k) if !each.iter().any(|(key, base, _)| key == k || *base == k) => {
                        let count = |write: &str| each.iter().filter(|(_, base, _)| *base == write).count();
                        match k.rsplit_once('.') {
                            Some((write, n)) if count(write) > 0 => format!(
                                "parameters.{k}.{}: statements.{write} is {} statement{}, and there is no statement {n}",
                                toml_key(name),
                                count(write),
                                if count(write) == 1 { "" } else { "s" }
                            ),
                            _ => format!("parameters.{k}.{}: your profile has no statements.{k}", toml_key(name)),
                        }
                    }
                    Some(k) => format!(
                        "parameters.{k}.{}: statements.{k} has no parameter {}",
                        toml_key(name),
                        shown_param(name)
                    ),
                    None => {
                        format!("parameters.{}: no statement has a parameter {}", toml_key(name), shown_param(name))
                    }
                });
            }
        }
        problems
    }

    /// Runs `sql` with those of `params` it names; returns the rows it gave back (their columns
    /// renamed as the profile's `[columns]` maps them) and the number of rows it changed. Logged
    /// with the values written in.
    fn run(&mut self, key: &str, sql: &str, params: &Params) -> Result<Answer, StoreError> {
        let now = params.iter().find_map(|(n, v)| match (*n, v) {
            ("now", V::Time(now)) => Some(*now),
            _ => None,
        });
        if let Some(now) = now {
            self.last_now = now;
        }
        let values = self.values(key, sql, params);
        let answer = self.run_unchecked(key, sql, &values, now);
        if let Err(StoreError::Setup(problem)) = &answer {
            self.problem.get_or_insert_with(|| problem.clone());
        }
        answer
    }

    /// A write's statements in one transaction (a savepoint inside one already open), each
    /// with its own `[parameters.KEY.N]`: kept only where every one changed a row — the first
    /// that changes none rolls them all back, as the queue's code returning its error does.
    /// One statement is [`ProfileStore::run`].
    fn run_parts(&mut self, key: &str, sql: &str, params: &Params) -> Result<Answer, StoreError> {
        let parts = parts(sql);
        if parts.len() == 1 {
            return self.run(key, sql, params);
        }
        let opened = !self.held;
        self.exec(if opened { "BEGIN" } else { "SAVEPOINT outbox_check_write" })?;
        self.held = true;
        let mut last = (Vec::new(), 0);
        let mut kept = true;
        for (n, part) in parts.iter().enumerate() {
            match self.run(&format!("{key}.{}", n + 1), part, params) {
                Ok((rows, changed)) if changed > 0 => last = (rows, changed),
                Ok(_) => {
                    kept = false;
                    break;
                }
                Err(e) => {
                    let _ = self.exec(if opened { "ROLLBACK" } else { "ROLLBACK TO SAVEPOINT outbox_check_write" });
                    self.held = !opened;
                    return Err(e);
                }
            }
        }
        let end = match (opened, kept) {
            (true, true) => "COMMIT",
            (true, false) => "ROLLBACK",
            (false, true) => "RELEASE SAVEPOINT outbox_check_write",
            (false, false) => "ROLLBACK TO SAVEPOINT outbox_check_write",
        };
        self.exec(end)?;
        self.held = !opened;
        Ok(if kept { last } else { (Vec::new(), 0) })
    }

    /// What `rescue_all` is given.
    fn sweep_params(&self, now: Instant, max_attempts: u32) -> Params {
        vec![
            ("now", time(now)),
            ("max_attempts", int(max_attempts)),
            ("lease_ms", span(self.lease)),
            ("horizon", V::Horizon(self.horizon(now).0)),
        ]
    }

    /// A sweep's statements (`rescue_all`, `schedule`): one, or a list run in order in one
    /// transaction, each whether or not the one before it changed a row, every part's returned
    /// rows together.
    fn run_sweep(&mut self, key: &str, sql: &str, params: &Params) -> Result<Vec<BTreeMap<String, V>>, StoreError> {
        let parts = parts(sql);
        if parts.len() == 1 {
            return Ok(self.run(key, sql, params)?.0);
        }
        let opened = !self.held;
        self.exec(if opened { "BEGIN" } else { "SAVEPOINT outbox_check_write" })?;
        self.held = true;
        let mut all = Vec::new();
        for (n, part) in parts.iter().enumerate() {
            match self.run(&format!("{key}.{}", n + 1), part, params) {
                Ok((rows, _)) => all.extend(rows),
                Err(e) => {
                    let _ = self.exec(if opened { "ROLLBACK" } else { "ROLLBACK TO SAVEPOINT outbox_check_write" });
                    self.held = !opened;
                    return Err(e);
                }
            }
        }
        self.exec(if opened { "COMMIT" } else { "RELEASE SAVEPOINT outbox_check_write" })?;
        self.held = !opened;
        Ok(all)
    }

    /// Transaction control around a write's statements, logged with them.
    fn exec(&mut self, sql: &str) -> Result<(), StoreError> {
        match &mut self.db {
            Db::Sqlite(conn) => conn.execute_batch(sql)?,
            Db::Postgres(scratch) => scratch.borrow_mut().client().batch_execute(sql)?,
        }
        self.log.push(format!("{sql};"));
        if sql.starts_with("ROLLBACK") {
            // The clock set inside it went with it.
            self.clock = None;
        }
        Ok(())
    }

    /// The values of the parameters `sql` names: what `[parameters]` gives the name (the
    /// statement's own table first), else the run's value of that name.
    fn values(&self, key: &str, sql: &str, params: &Params) -> Values {
        let ours = |name: &str| params.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
        let mut values: Values = Vec::new();
        for (_, _, name) in named_params(sql) {
            if values.iter().any(|(n, _)| n == name) {
                continue;
            }
            let value = match self.profile.parameters.given(key, name) {
                Some(given) => given.value(&ours),
                None => ours(name),
            };
            values.extend(value.map(|v| (name.to_string(), v)));
        }
        values
    }

    /// The run's names a statement's parameters reach, through `[parameters]`.
    fn ours_in(&self, key: &str, sql: &str) -> Vec<String> {
        named_params(sql)
            .into_iter()
            .flat_map(|(_, _, name)| match self.profile.parameters.given(key, name) {
                Some(given) => given.ours().into_iter().map(String::from).collect(),
                None => vec![name.to_string()],
            })
            .collect()
    }

    fn run_unchecked(&mut self, key: &str, sql: &str, params: &Values, now: Option<u64>) -> Result<Answer, StoreError> {
        let value_of = |name: &str| {
            params.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone()).ok_or_else(|| {
                StoreError::Setup(format!(
                    "statements.{key}: parameter {} is not one this statement gets",
                    shown_param(name)
                ))
            })
        };
        let scale = self.scale;
        let mut shown: Vec<(String, String)> = Vec::new();
        let (mut answer, changed) = match &mut self.db {
            Db::Sqlite(conn) => {
                let mut stmt = conn
                    .prepare(sql)
                    .map_err(|e| StoreError::Setup(format!("statements.{key}: {}", sqlite_said(&e))))?;
                for i in 1..=stmt.parameter_count() {
                    let raw = stmt.parameter_name(i).unwrap_or("?");
                    let positional =
                        raw.len() > 1 && raw.starts_with('$') && raw[1..].bytes().all(|b| b.is_ascii_digit());
                    let name =
                        if positional { raw.to_string() } else { raw.trim_start_matches([':', '@', '$']).to_string() };
                    let value = match value_of(&name)? {
                        V::Null | V::Other(_) => rusqlite::types::Value::Null,
                        V::Int(i) => rusqlite::types::Value::Integer(i),
                        V::Bool(b) => rusqlite::types::Value::Integer(i64::from(b)),
                        V::Float(f) => rusqlite::types::Value::Real(f),
                        V::List(_) => {
                            return Err(StoreError::Setup(format!(
                                "statements.{key}: parameter {} is an array, which SQLite has no value for",
                                shown_param(&name)
                            )))
                        }
                        V::At(micros) => rusqlite::types::Value::Integer(micros / 1000),
                        V::Time(ms) | V::Span(ms) | V::Horizon(ms) => {
                            rusqlite::types::Value::Integer(scaled(ms, scale))
                        }
                        V::Seconds(ms) => rusqlite::types::Value::Integer(scaled(ms, scale) / 1000),
                        V::Text(t) => rusqlite::types::Value::Text(t),
                    };
                    stmt.raw_bind_parameter(i, value)?;
                }
                let names: Vec<String> = stmt.column_names().into_iter().map(column_name).collect();
                let mut out = Vec::new();
                let mut rows = stmt.raw_query();
                while let Some(row) = rows.next()? {
                    let mut values = BTreeMap::new();
                    for (i, n) in names.iter().enumerate() {
                        let v = match row.get::<_, rusqlite::types::Value>(i)? {
                            rusqlite::types::Value::Null => V::Null,
                            rusqlite::types::Value::Integer(i) => V::Int(i),
                            rusqlite::types::Value::Text(t) => V::Text(t),
                            rusqlite::types::Value::Real(_) => V::Other("real".into()),
                            rusqlite::types::Value::Blob(_) => V::Other("blob".into()),
                        };
                        values.insert(n.clone(), v);
                    }
                    out.push(values);
                }
                drop(rows);
                drop(stmt);
                (out, conn.changes() as usize)
            }
            Db::Postgres(scratch) => {
                let (pg, names) = positional(sql);
                let mut scratch = scratch.borrow_mut();
                let client = scratch.client();
                // The run's clock, which the shadowed now() reads: the statement's time.
                if let Some(now) = now {
                    let now = scaled(now, scale);
                    if self.clock != Some(now) {
                        client.execute(SET_CLOCK, &[&now])?;
                        self.clock = Some(now);
                    }
                }
                // The server refusing the statement is the profile's problem; a connection that
                // died is the run's (a relay reconnects).
                let stmt = client.prepare(&pg).map_err(|e| match e.as_db_error() {
                    Some(_) if e.code() != Some(&postgres::error::SqlState::ADMIN_SHUTDOWN) => {
                        StoreError::Setup(format!("statements.{key}: {}", super::bind::one_line(&e)))
                    }
                    _ => StoreError::Postgres(super::bind::one_line(&e)),
                })?;
                let mut values = Vec::with_capacity(names.len());
                for (name, ty) in names.iter().zip(stmt.params()) {
                    let value = value_of(name)?;
                    shown.push((name.clone(), render_as(&value, ty, scale)));
                    values.push(pg_value(key, name, ty, &value, scale)?);
                }
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
                    values.iter().map(|b| b as &(dyn postgres::types::ToSql + Sync)).collect();
                // A constraint, a value or a name the server refused at run time: named by its
                // statement (handled as any refusal of the server's is).
                let refused = |e: postgres::Error| match e.code().map(|c| &c.code()[..2]) {
                    Some("22" | "23" | "42") => {
                        StoreError::Postgres(format!("statements.{key}: {}", super::bind::one_line(&e)))
                    }
                    _ => StoreError::from(e),
                };
                let (rows, changed) = if self.stamp && !self.held {
                    // One transaction: the statement, then the stamp, so for two statements on
                    // one row the stamps order as the row's locks were taken.
                    let mut tx = client.transaction()?;
                    let (rows, changed) = if stmt.columns().is_empty() {
                        (Vec::new(), tx.execute(&stmt, &refs).map_err(refused)? as usize)
                    } else {
                        let rows = tx.query(&stmt, &refs).map_err(refused)?;
                        let n = rows.len();
                        (rows, n)
                    };
                    self.last_stamp = tx.query_one(super::postgres::COMMIT_STAMP, &[])?.get(0);
                    tx.commit()?;
                    (rows, changed)
                } else if stmt.columns().is_empty() {
                    (Vec::new(), client.execute(&stmt, &refs).map_err(refused)? as usize)
                } else {
                    let rows = client.query(&stmt, &refs).map_err(refused)?;
                    let n = rows.len();
                    (rows, n)
                };
                let mut out = Vec::with_capacity(rows.len());
                for row in &rows {
                    let mut cells = BTreeMap::new();
                    for i in 0..row.len() {
                        cells.insert(column_name(row.columns()[i].name()), pg_cell(row, i, scale)?);
                    }
                    out.push(cells);
                }
                (out, changed)
            }
        };
        // The profile's names for the model's fields: `[columns] message_id = "id"`.
        for (field, columns) in &self.profile.file.columns {
            for row in &mut answer {
                if let Some(v) = columns.names().iter().find_map(|c| row.get(c)).cloned() {
                    row.insert(field.clone(), v);
                }
            }
        }
        self.log.push(written_in(sql, params, &shown, scale));
        Ok((answer, changed))
    }

    /// [`ProfileStore::run`] of a statement that takes only the last statement's `:now`, not logged (reading the table
    /// back is the harness's, not part of the script).
    fn run_quietly(&mut self, key: &str, sql: &str) -> Result<Answer, StoreError> {
        let answer = self.run(key, sql, &vec![("now", V::Time(self.last_now))]);
        self.log.pop();
        answer
    }

    fn write_sql(&self, kind: &WriteKind) -> Option<(&'static str, String)> {
        let s = &self.profile.file.statements;
        match kind {
            WriteKind::Published => Some(("mark_published", s.mark_published.clone())),
            WriteKind::Ambiguous { .. } => s.mark_ambiguous.clone().map(|q| ("mark_ambiguous", q)),
            WriteKind::Retry { .. } => s.mark_retry.clone().map(|q| ("mark_retry", q)),
            WriteKind::Failed { .. } => s.mark_failed.clone().map(|q| ("mark_failed", q)),
            WriteKind::Exhausted { .. } => s.mark_exhausted.clone().map(|q| ("mark_exhausted", q)),
        }
    }
}

/// What in a statement would read the database's clock or draw a random number, if anything
/// (SQLite, where nothing stands in for the clock).
pub fn reads_the_clock(sql: &str) -> Option<&'static str> {
    clock_syntax(sql).or_else(|| {
        let lower = sql.to_ascii_lowercase();
        [
            ("unixepoch()", "the database's clock (unixepoch())"),
            ("now()", "the database's clock (now())"),
            ("clock_timestamp", "the database's clock (clock_timestamp())"),
            ("statement_timestamp", "the database's clock (statement_timestamp())"),
            ("transaction_timestamp", "the database's clock (transaction_timestamp())"),
            ("random()", "a random number (random())"),
            ("randomblob", "a random number (randomblob())"),
        ]
        .into_iter()
        .find(|(w, _)| lower.contains(w))
        .map(|(_, what)| what)
    })
}

/// What in a statement reads the database's clock where no function can stand in for it — the
/// SQL syntax `CURRENT_TIMESTAMP`, `LOCALTIMESTAMP`, `CURRENT_DATE`, `CURRENT_TIME`, `'now'`, a
/// clock named in `pg_catalog` — or draws a random number the run does not draw itself
/// (`gen_random_uuid()`; `random()` is the run's own stream on PostgreSQL).
pub fn clock_syntax(sql: &str) -> Option<&'static str> {
    let lower = sql.to_ascii_lowercase();
    let words = |w: &str| {
        lower.match_indices(w).any(|(i, _)| {
            let before = lower[..i].chars().next_back().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            let after = lower[i + w.len()..].chars().next().is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
            before && after
        })
    };
    [
        ("current_timestamp", "the database's clock (CURRENT_TIMESTAMP)"),
        ("current_time", "the database's clock (CURRENT_TIME)"),
        ("current_date", "the database's clock (CURRENT_DATE)"),
        ("localtimestamp", "the database's clock (LOCALTIMESTAMP)"),
        ("localtime", "the database's clock (LOCALTIME)"),
        ("'now'", "the database's clock ('now')"),
        ("pg_catalog.now", "the database's clock (pg_catalog.now())"),
        ("pg_catalog.clock_timestamp", "the database's clock (pg_catalog.clock_timestamp())"),
        ("pg_catalog.statement_timestamp", "the database's clock (pg_catalog.statement_timestamp())"),
        ("pg_catalog.transaction_timestamp", "the database's clock (pg_catalog.transaction_timestamp())"),
        ("pg_catalog.random", "a random number (pg_catalog.random())"),
        ("gen_random_uuid", "a random number (gen_random_uuid())"),
    ]
    .into_iter()
    .find(
        |(w, _)| if w.starts_with('\'') || w.contains('.') || w.ends_with(')') { lower.contains(w) } else { words(w) },
    )
    .map(|(_, what)| what)
}

fn render(value: &V, scale: u64) -> String {
    match value {
        V::Null | V::Other(_) => "NULL".into(),
        V::Int(i) => i.to_string(),
        V::Bool(b) => b.to_string().to_uppercase(),
        V::Float(f) => f.to_string(),
        V::List(items) => format!("({})", items.iter().map(|i| render(i, scale)).collect::<Vec<_>>().join(", ")),
        V::At(micros) => format!("timestamptz '2000-01-01 00:00:00+00' + interval '{micros} microseconds'"),
        V::Time(ms) | V::Span(ms) | V::Horizon(ms) => scaled(*ms, scale).to_string(),
        V::Seconds(ms) => (scaled(*ms, scale) / 1000).to_string(),
        V::Text(t) => format!("'{}'", t.replace('\'', "''")),
    }
}

/// A value as a literal of the type the server gave its parameter: a timestamp or interval as
/// PostgreSQL reads it back, an array as `ARRAY[…]`, an enum's label cast to it.
fn render_as(value: &V, ty: &postgres::types::Type, scale: u64) -> String {
    use postgres::types::{Kind, Type};
    match (ty.kind(), value) {
        (_, V::Null) => "NULL".into(),
        (Kind::Array(element), V::List(items)) => format!(
            "ARRAY[{}]::{}[]",
            items.iter().map(|i| render_as(i, element, scale)).collect::<Vec<_>>().join(", "),
            element.name()
        ),
        (Kind::Array(element), v) => format!("ARRAY[{}]::{}[]", render_as(v, element, scale), element.name()),
        (Kind::Composite(fields), V::List(items)) => format!(
            "ROW({})::{}",
            fields.iter().zip(items).map(|(f, i)| render_as(i, f.type_(), scale)).collect::<Vec<_>>().join(", "),
            ty.name()
        ),
        (Kind::Enum(_), V::Text(t)) => format!("'{t}'::{}", ty.name()),
        _ => match (ty, value) {
            (&Type::TIMESTAMPTZ | &Type::TIMESTAMP, V::Time(ms)) => {
                format!("timestamptz '2000-01-01 00:00:00+00' + interval '{} milliseconds'", scaled(*ms, scale))
            }
            (&Type::TIMESTAMPTZ | &Type::TIMESTAMP, V::Horizon(ms)) => format!(
                "timestamptz '2000-01-01 00:00:00+00' + interval '{} microseconds'",
                scaled(*ms, scale) * 1000 + 1
            ),
            (&Type::INTERVAL, V::Span(ms)) => format!("interval '{} milliseconds'", scaled(*ms, scale)),
            (&Type::UUID, V::Int(i)) => format!("'{}'::uuid", uuid_text(*i as u64 as u128)),
            (&Type::UUID, V::Text(t)) => format!("'{t}'::uuid"),
            (&Type::JSONB | &Type::JSON | &Type::BYTEA | &Type::INTERVAL, V::Text(_)) => {
                format!("{}::{}", render(value, scale), ty.name())
            }
            _ => render(value, scale),
        },
    }
}

/// A column's value as the model's integer: an id, a count, a time or duration in the model's
/// milliseconds (a uuid: its low 64 bits, the id or token the run bound).
fn as_int(key: &str, column: &str, v: Option<&V>) -> Result<Option<i64>, StoreError> {
    match v {
        None | Some(V::Null) => Ok(None),
        Some(V::Int(i)) => Ok(Some(*i)),
        Some(V::Bool(b)) => Ok(Some(i64::from(*b))),
        Some(V::Float(f)) => Ok(Some(*f as i64)),
        Some(V::List(_)) => Err(StoreError::Setup(format!("statements.{key}: column {column} is an array"))),
        Some(V::At(micros)) => Ok(Some(micros / 1000)),
        Some(V::Time(ms) | V::Span(ms) | V::Horizon(ms) | V::Seconds(ms)) => Ok(Some(*ms as i64)),
        Some(V::Text(t)) => t
            .parse()
            .ok()
            .or_else(|| parse_uuid(t).map(|u| u as u64 as i64))
            .map(Some)
            .ok_or_else(|| StoreError::Corrupt(format!("{key}: column {column} holds '{t}', not an integer"))),
        Some(V::Other(ty)) => Err(StoreError::Setup(format!(
            "statements.{key}: column {column} is {ty}, which no model field is read from (return an integer, text, a uuid, a timestamp or an interval)"
        ))),
    }
}

/// Whether a statement reaches outside the scratch schema it runs in: a search path of its own,
/// a schema made or dropped, a name qualified by `public.`.
pub fn leaves_the_schema(sql: &str) -> Option<String> {
    let lower = sql.to_ascii_lowercase();
    for (what, why) in [
        (
            "search_path",
            "sets the search path: a profile runs only in outbox-check's scratch schema, with unqualified names",
        ),
        ("create schema", "creates a schema: a profile runs only in outbox-check's scratch schema"),
        ("drop schema", "drops a schema: a profile runs only in outbox-check's scratch schema"),
        ("alter schema", "alters a schema: a profile runs only in outbox-check's scratch schema"),
        ("public.", "names public.…: a profile runs only in outbox-check's scratch schema, with unqualified names"),
    ] {
        if lower.contains(what) {
            return Some(why.to_string());
        }
    }
    None
}

impl Store for ProfileStore {
    fn enqueue(&mut self, req: &EnqueueRequest) -> Result<EnqueueResult, StoreError> {
        let key = (req.tenant_id.0, req.aggregate_id.0);
        let current = self.versions.get(&key).copied().unwrap_or(0);
        if current != req.expected_version {
            return Ok(EnqueueResult::Stale { current_version: current });
        }
        let params: Params = vec![
            ("id", int(self.table_id(req.message_id))),
            ("tenant", int(req.tenant_id.0)),
            ("aggregate", int(req.aggregate_id.0)),
            ("version", int(req.expected_version + 1)),
            ("now", time(req.now)),
            ("run_at", time(req.now)),
            ("max_attempts", int(self.budget)),
            ("lease_ms", span(self.lease)),
            ("lease_s", V::Seconds(self.lease.0)),
        ];
        let sql = self.profile.file.statements.enqueue.clone();
        let (rows, _) = self.run("enqueue", &sql, &params)?;
        // The id the table gave the row, where a sequence gives it (`RETURNING id`): the run's
        // message is that row from now on.
        if let Some(id) = rows.first().map(|row| as_int("enqueue", "message_id", row.get("message_id"))).transpose()? {
            self.assigned.extend(id.map(|id| (req.message_id, id)));
        }
        self.versions.insert(key, current + 1);
        self.tenants.insert(req.message_id, req.tenant_id);
        Ok(EnqueueResult::Applied { version: req.expected_version + 1 })
    }

    fn claim(&mut self, req: &ClaimRequest) -> Result<Vec<Lease>, StoreError> {
        let params: Params = vec![
            ("now", time(req.now)),
            ("owner", int(req.owner.0)),
            ("tenant", int(req.tenant_id.0)),
            ("batch", int(req.batch)),
            ("lease_ms", span(req.lease)),
            ("lease_s", V::Seconds(req.lease.0)),
            ("lease_until", time(req.now.plus(req.lease))),
            ("max_attempts", int(req.max_attempts)),
        ];
        let sql = self.profile.file.statements.claim.clone();
        let random = self.random_tokens();
        let rows = if random {
            // A fresh random token is one value for one row: the claim runs once per row, with
            // :batch 1 and the core's next token, until it has the batch or finds no row (what
            // a relay around seed 003's LIMIT 1 claim does).
            let mut all = Vec::new();
            for _ in 0..req.batch {
                let mut params = params.clone();
                params.retain(|(n, _)| *n != "batch");
                params.push(("batch", int(1)));
                let number = match &self.shared_tokens {
                    Some(shared) => shared.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
                    None => self.random_issued + 1,
                };
                params.push(("token", V::Text(uuid_text(u128::from(crate::core::random_token(number))))));
                let (rows, _) = self.run("claim", &sql, &params)?;
                if rows.is_empty() {
                    break;
                }
                self.random_issued += rows.len() as u64;
                all.extend(rows);
            }
            all
        } else {
            let mut params = params;
            params.push(("token", V::Null));
            self.run("claim", &sql, &params)?.0
        };
        let mut leases = Vec::new();
        for row in rows {
            let id = as_int("claim", "message_id", row.get("message_id"))?
                .ok_or_else(|| StoreError::Setup("statements.claim returns no message_id column".into()))?;
            let id = i64::from(self.model_id(id).0);
            leases.push(Lease {
                message_id: MessageId(id as u32),
                // The row's tenant: its column, else the tenant the run enqueued it for.
                tenant_id: match as_int("claim", "tenant_id", row.get("tenant_id"))? {
                    Some(t) => TenantId(t as u16),
                    None => self.tenants.get(&MessageId(id as u32)).copied().unwrap_or(req.tenant_id),
                },
                owner: req.owner,
                token: LeaseToken(token_of("claim", random, row.get("lease_token"))?),
                attempts: as_int("claim", "attempts", row.get("attempts"))?.unwrap_or(0) as u32,
                claim_seq: 0,
            });
        }
        // The rows a claim took are a set (RETURNING keeps no order): by id.
        leases.sort_by_key(|l| l.message_id);
        Ok(leases)
    }

    fn write(&mut self, req: &WriteRequest) -> Result<WriteResult, StoreError> {
        let Some((key, sql)) = self.write_sql(&req.kind) else {
            return Err(StoreError::Setup(format!("the profile has no statement for {}", req.kind.name())));
        };
        let policy: Policy = self.policy;
        let retry_at = req.now.plus(policy.backoff.delay(policy.attempts_after_failure(req.lease.attempts)));
        let params: Params = vec![
            ("id", int(self.table_id(req.lease.message_id))),
            // The id as the one element of an array (`id = ANY(:ids)`, sqlc's `@ids::bigint[]`).
            ("ids", int(self.table_id(req.lease.message_id))),
            ("tenant", int(req.lease.tenant_id.0)),
            ("owner", int(req.lease.owner.0)),
            ("token", self.token_param(req.lease.token)),
            ("attempts", int(req.lease.attempts)),
            ("now", time(req.now)),
            ("code", text(req.kind.code().map_or("", FailureCode::as_str))),
            ("retry_at", time(retry_at)),
            // The delay itself: an interval (underway's `run_at = now() + $2`) or milliseconds.
            ("retry_in", V::Span(retry_at.0.saturating_sub(req.now.0))),
            ("retry_in_s", V::Seconds(retry_at.0.saturating_sub(req.now.0))),
            ("backoff_base_ms", span(policy.backoff.base)),
            ("backoff_cap_ms", span(policy.backoff.cap)),
            ("max_attempts", int(req.max_attempts)),
        ];
        // A design that deletes the row it completes, or (pgmq's archive, Laravel's failed_jobs)
        // that it records failed.
        let gone_as = match req.kind {
            WriteKind::Published => {
                (policy.completion == crate::core::policy::Completion::Delete).then_some(Status::Published)
            }
            WriteKind::Failed { .. } => policy.failure_deletes.then_some(Status::Failed),
            _ => policy.failure_deletes.then_some(Status::Exhausted),
        };
        self.run_observed(key, &sql, &params, req.lease.message_id, gone_as)
    }

    fn schedule(&mut self, now: Instant) -> Result<Vec<MessageId>, StoreError> {
        let Some(sql) = self.profile.file.statements.schedule.clone() else { return Ok(Vec::new()) };
        let params: Params = vec![("now", time(now)), ("lease_ms", span(self.lease))];
        let rows = self.run_sweep("schedule", &sql, &params)?;
        moved_ids(self, "schedule", &rows)
    }

    fn can_schedule(&self) -> bool {
        self.profile.file.statements.schedule.is_some()
    }

    fn reap(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        let Some(sql) = self.profile.file.statements.reap.clone() else { return Ok(Vec::new()) };
        let params: Params =
            vec![("now", time(now)), ("max_attempts", int(max_attempts)), ("lease_ms", span(self.lease))];
        let (rows, _) = self.run("reap", &sql, &params)?;
        moved_ids(self, "reap", &rows)
    }

    fn rows(&mut self) -> Result<Vec<Row>, StoreError> {
        let sql = self.profile.file.statements.rows.clone();
        let (rows, _) = self.run_quietly("rows", &sql)?;
        let statuses = self.profile.statuses.clone();
        let random = self.random_tokens();
        let mut out = Vec::new();
        for values in rows {
            let get = |c: &str| as_int("rows", c, values.get(c));
            // A time column of integers holds the queue's milliseconds: the model's times the
            // scale; a timestamp was read in the model's already.
            let scale = self.scale.max(1) as i64;
            let at = |c: &str| match values.get(c) {
                Some(V::Int(ms)) => Ok(Some(Instant(((*ms).max(0) as u64).div_ceil(scale as u64)))),
                other => as_int("rows", c, other).map(|v| v.map(|v| Instant(v.max(0) as u64))),
            };
            let status = match values.get("status") {
                // The first status a shared name stands for (PENDING, FAILED): the model's is
                // viewed the same way (`view_status`).
                Some(V::Text(t)) => {
                    statuses.names().into_iter().find_map(|(name, status)| (name == *t).then_some(status)).ok_or_else(
                        || StoreError::Corrupt(format!("rows: status {t:?} is none of the profile's statuses")),
                    )?
                }
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "rows: status {}",
                        other.map_or("missing".into(), |v| render(v, 1))
                    )))
                }
            };
            let code = match values.get("last_failure_code") {
                Some(V::Text(t)) if !t.is_empty() => Some(
                    FailureCode::parse(t)
                        .ok_or_else(|| StoreError::Corrupt(format!("rows: last_failure_code {t:?}")))?,
                ),
                _ => None,
            };
            out.push(Row {
                message_id: self.model_id(get("message_id")?.unwrap_or(0)),
                tenant_id: TenantId(get("tenant_id")?.unwrap_or(0) as u16),
                aggregate_id: crate::core::AggregateId(0),
                aggregate_version: 0,
                status,
                attempts: get("attempts")?.unwrap_or(0) as u32,
                lease_owner: get("lease_owner")?.map(|o| RelayId(o as u16)),
                lease_token: LeaseToken(token_of("rows", random, values.get("lease_token"))?),
                lease_expires_at: at("lease_expires_at")?,
                next_attempt_at: waiting_retry(status, at("next_attempt_at")?),
                last_failure_code: code,
                created_at: at("created_at")?.unwrap_or(Instant(0)),
                published_at: at("published_at")?,
                deleted: false,
            });
        }
        out.sort_by_key(|r| r.message_id);
        Ok(out)
    }

    fn log(&self) -> &[String] {
        &self.log
    }

    fn can_write(&self, kind: &WriteKind) -> bool {
        self.write_sql(kind).is_some()
    }

    fn can_reap(&self) -> bool {
        self.profile.file.statements.reap.is_some()
    }

    fn takes_budget(&self) -> bool {
        // If none does, the budget is written into the SQL and the random sequences keep the
        // model's 3.
        self.profile
            .file
            .statements
            .each()
            .into_iter()
            .filter_map(|(key, sql)| Some((key, sql?)))
            .any(|(key, sql)| self.ours_in(key, sql).iter().any(|p| p == "max_attempts"))
    }

    fn can_rescue(&self) -> bool {
        let statements = &self.profile.file.statements;
        statements.rescue_all.is_some() || (statements.rescue_read.is_some() && statements.rescue.is_some())
    }

    fn backoff_unit(&self) -> u64 {
        match &self.profile.file.time {
            Some(t) if t.delays == Delays::Absolute => self.scale,
            _ => 1,
        }
    }

    fn sweeps(&self) -> bool {
        self.profile.file.statements.rescue_all.is_some()
    }

    fn rescue_all(&mut self, now: Instant, max_attempts: u32) -> Result<Vec<MessageId>, StoreError> {
        let Some(sql) = self.profile.file.statements.rescue_all.clone() else { return Ok(Vec::new()) };
        let params = self.sweep_params(now, max_attempts);
        let rows = self.run_sweep("rescue_all", &sql, &params)?;
        moved_ids(self, "rescue_all", &rows)
    }

    fn rescue_read(&mut self, now: Instant) -> Result<Option<(MessageId, LeaseToken)>, StoreError> {
        let Some(sql) = self.profile.file.statements.rescue_read.clone() else { return Ok(None) };
        let params: Params =
            vec![("now", time(now)), ("lease_ms", span(self.lease)), ("horizon", V::Horizon(self.horizon(now).0))];
        let (rows, _) = self.run("rescue_read", &sql, &params)?;
        let random = self.random_tokens();
        let mut first: Option<(MessageId, LeaseToken)> = None;
        for row in rows {
            let id = as_int("rescue_read", "message_id", row.get("message_id"))?
                .ok_or_else(|| StoreError::Setup("statements.rescue_read returns no message_id column".into()))?;
            let id = i64::from(self.model_id(id).0);
            let token = LeaseToken(token_of("rescue_read", random, row.get("lease_token"))?);
            if first.is_none_or(|(m, _)| id < i64::from(m.0)) {
                first = Some((MessageId(id as u32), token));
            }
        }
        Ok(first)
    }

    fn rescue(&mut self, req: &crate::core::ReleaseRequest, max_attempts: u32) -> Result<WriteResult, StoreError> {
        let statements = &self.profile.file.statements;
        // A row the design gives up on, where the queue's code picks the statement.
        let (key, sql) = match (req.to, &statements.rescue_exhausted) {
            (Status::Exhausted | Status::Failed, Some(sql)) => ("rescue_exhausted", sql.clone()),
            _ => match &statements.rescue {
                Some(sql) => ("rescue", sql.clone()),
                None => return Err(StoreError::Setup("the profile has no rescue statement".into())),
            },
        };
        let params: Params = vec![
            ("id", int(self.table_id(req.lease.message_id))),
            ("ids", int(self.table_id(req.lease.message_id))),
            ("retry_at", time(req.retry_at.unwrap_or(req.now))),
            ("tenant", int(req.lease.tenant_id.0)),
            ("token", self.token_param(req.lease.token)),
            ("now", time(req.now)),
            ("max_attempts", int(max_attempts)),
            ("lease_ms", span(self.lease)),
            ("horizon", V::Horizon(self.horizon(req.now).0)),
        ];
        let gone_as = self.policy.failure_deletes.then_some(Status::Exhausted);
        self.run_observed(key, &sql, &params, req.lease.message_id, gone_as)
    }

    fn problem(&self) -> Option<String> {
        self.problem.clone()
    }

    fn scratch_kind(&self) -> Option<&'static str> {
        match &self.db {
            Db::Postgres(scratch) => {
                Some(if scratch.borrow().place().database.is_some() { "database" } else { "schema" })
            }
            Db::Sqlite(_) => None,
        }
    }

    fn fields(&self) -> Option<super::bind::Fields> {
        Some(super::bind::Fields {
            not_compared: COLUMNS[1..]
                .iter()
                .filter(|c| !self.columns.iter().any(|n| n == *c))
                .map(|c| c.to_string())
                .collect(),
            not_read: self.not_read.clone(),
        })
    }

    fn fixed_batch(&self) -> Option<u32> {
        let claim = &self.profile.file.statements.claim;
        // A claim of one fresh random token per row is run once per row, up to the batch.
        if self.random_tokens() || self.ours_in("claim", claim).iter().any(|p| p == "batch") {
            return None;
        }
        // The last LIMIT written in (a claim's own, after any subquery's); none: every row it
        // matches.
        let lower = claim.to_ascii_lowercase();
        Some(
            lower
                .match_indices("limit")
                .filter_map(|(i, _)| {
                    let rest = lower[i + 5..].trim_start();
                    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
                    digits.parse::<u32>().ok()
                })
                .last()
                .unwrap_or(u32::MAX),
        )
    }

    fn set_run(&mut self, max_attempts: u32, lease: crate::core::Duration) {
        self.budget = max_attempts;
        self.set_lease(lease);
    }

    fn view_token(&self, token: LeaseToken) -> LeaseToken {
        if self.keeps_tokens() {
            token
        } else {
            LeaseToken(0)
        }
    }

    fn view_status(&self, status: Status) -> Status {
        let names = self.profile.statuses.names();
        let name = names.iter().find(|(_, s)| *s == status).map(|(n, _)| n.clone()).unwrap_or_default();
        names.iter().find(|(n, _)| *n == name).map_or(status, |(_, s)| *s)
    }

    /// The model's row as the profile's SELECT shows it: what it has no column for is cleared,
    /// and its status is the one its name is read back as.
    fn view(&self, row: Row) -> Row {
        let has = |c: &str| self.columns.iter().any(|n| n == c);
        Row {
            status: self.view_status(row.status),
            aggregate_id: crate::core::AggregateId(0),
            aggregate_version: 0,
            tenant_id: if has("tenant_id") { row.tenant_id } else { TenantId(0) },
            attempts: if has("attempts") { row.attempts } else { 0 },
            lease_owner: if has("lease_owner") { row.lease_owner } else { None },
            lease_token: if has("lease_token") { row.lease_token } else { LeaseToken(0) },
            lease_expires_at: if has("lease_expires_at") { row.lease_expires_at } else { None },
            next_attempt_at: if has("next_attempt_at") { waiting_retry(row.status, row.next_attempt_at) } else { None },
            last_failure_code: if has("last_failure_code") { row.last_failure_code } else { None },
            created_at: if has("created_at") { row.created_at } else { Instant(0) },
            published_at: if has("published_at") { row.published_at } else { None },
            ..row
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_constants_are_the_queues_own_time() {
        assert_eq!(constant_interval("15m"), Some(900_000_000));
        assert_eq!(constant_interval("0s"), Some(0));
        assert_eq!(constant_interval("0"), None);
        assert_eq!(constant_interval("soon"), None);
    }
}

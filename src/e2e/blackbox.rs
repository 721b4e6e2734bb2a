//! `outbox-check e2e --relay COMMAND`: the user's own relay, in any language, run as N
//! processes and judged black-box. The run makes a scratch database holding the profile's schema,
//! starts the broker (a NATS server of its own, or a queue of its own on the machine's
//! RabbitMQ), puts a loopback proxy in front of PostgreSQL and of the broker for each relay, and
//! starts the command N times with the contract's environment (docs/relays.md). The application's
//! enqueues go through the profile's `enqueue`, the design's reaper through its `reap`.
//!
//! What the run sees, without a line of the relay's code: every change to the outbox table, in
//! commit order, from the database-side recorder (`outbox-check record`'s triggers), each
//! attributed to the relay whose proxy opened the connection that made it (the server's
//! `inet_client_port()` is the proxy's upstream port); and every delivery, from its consumer. The
//! history in the trace format is checked by the oracle against the profile's design; the
//! deliveries against the table. What it cannot see is listed in the report's `not_judged`.
//!
//! Faults from one seed: relays killed (SIGKILL to the process group) and started again, paused
//! (SIGSTOP) past the lease, their backends terminated, their broker connections partitioned
//! and cut (at the proxy), the NATS server killed and started again.

use super::proxy::Proxy;
use super::*;
use crate::store::profile::Profile;

/// The harness's own session (enqueues and the reaper) in the recorded history.
const APP: &str = "outbox-check";

/// What black-box observation cannot judge, listed in every report.
pub const NOT_JUDGED: [&str; 5] = [
    "a statement that changed no row (a write its fence refused, a claim that took nothing): no trigger fires, so a zero-row write the relay took for success is judged only by what follows it",
    "a publication the broker never stored (lost, refused, timed out): only stored copies reach the consumer",
    "publications beyond the stored copies in the attempt budget (S3): the budget is judged by the copies the broker stored, a lower bound — a publication lost, refused or caught by the broker's deduplication is not counted",
    "which statement made a change: a write is read off the row's status before and after",
    "what the relay believed: its logs and return values are not read",
];

/// Messages the broker stored more copies of than a budget of `max` allows publications (S3).
/// Every stored copy is a publication of its own — a stream sequence on NATS; on RabbitMQ a
/// delivery not marked redelivered (a redelivery is a copy the consumer had, its ack lost) — so
/// the copies are a lower bound on the publications, and more copies than `max` is more
/// publications than `max`. A black-box run requeues nothing: one budget per message.
pub fn over_budget(deliveries: &[Delivery], max: u32) -> Vec<String> {
    let mut copies: std::collections::BTreeMap<&str, Vec<&Delivery>> = Default::default();
    for d in deliveries {
        let list = copies.entry(&d.message).or_default();
        let again = match d.sequence {
            Some(sequence) => list.iter().any(|c| c.sequence == Some(sequence)),
            None => d.redelivered,
        };
        if !again {
            list.push(d);
        }
    }
    copies
        .into_iter()
        .filter(|(_, list)| list.len() > max as usize)
        .map(|(message, mut list)| {
            list.sort_by_key(|d| d.stored_ms);
            let at: Vec<String> = list.iter().map(|d| secs(d.stored_ms.saturating_sub(CLOCK_OFFSET))).collect();
            format!(
                "{message}: {} copies stored (t={}), so at least {} publications against a budget of {max}",
                list.len(),
                at.join(", t="),
                list.len()
            )
        })
        .collect()
}

/// A user's relay process and what the run keeps of it.
struct UserRelay {
    child: Child,
    incarnation: u32,
    started: std::time::Instant,
    paused_until: Option<std::time::Instant>,
    database: Proxy,
    broker: Proxy,
    output: PathBuf,
}

impl UserRelay {
    /// Sends `signal` to the relay's whole process group (the command and what it started).
    fn signal(&self, signal: i32) {
        // SAFETY: kill has no preconditions; the group is the child's own (process_group(0)).
        unsafe {
            libc::kill(-(self.child.id() as i32), signal);
        }
    }

    fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for UserRelay {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            self.kill();
        } else {
            // The command may have left children in its group.
            self.signal(libc::SIGKILL);
        }
    }
}

/// The run's RabbitMQ queue, deleted however the run ends (an error too).
struct QueueRemoved {
    url: String,
    queue: String,
}

impl Drop for QueueRemoved {
    fn drop(&mut self) {
        let (url, queue) = (self.url.clone(), self.queue.clone());
        // A thread of its own: this one may be inside the run's runtime.
        let _ = std::thread::spawn(move || {
            nats::runtime().block_on(async {
                if let Ok(rabbit) = rabbitmq::connect(&url).await {
                    rabbit.delete(&queue).await;
                }
            })
        })
        .join();
    }
}

/// The table an `enqueue` inserts into (`INSERT INTO queue.jobs …`), where it says.
pub fn insert_table(enqueue: &str) -> Option<String> {
    let lower = enqueue.to_ascii_lowercase();
    let at = lower.find("insert into")? + "insert into".len();
    let name: String = enqueue[at..].trim_start().chars().take_while(|c| !c.is_whitespace() && *c != '(').collect();
    (!name.is_empty()).then_some(name)
}

/// The last non-empty line a relay printed, for an error message.
fn last_line(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).map_or_else(
        || "it printed nothing".into(),
        |l| {
            let l = l.trim();
            let short: String = l.chars().take(300).collect();
            format!("its last line: {short}")
        },
    )
}

/// The command that runs the same schedule again.
pub fn replay_command(options: &Options, command: &str, profile: &Path) -> String {
    format!(
        "outbox-check e2e --relay '{}' --profile {} --broker {} --relays {} --messages {} --seed {} --faults {} --lease-ms {} --max-attempts {} --backoff-base-ms {} --backoff-cap-ms {}",
        command.replace('\'', r"'\''"),
        profile.display(),
        match options.broker {
            Broker::Nats => "nats",
            Broker::Rabbitmq => "rabbitmq",
        },
        options.relays,
        options.messages,
        options.seed,
        options.faults.describe().replace(", ", ","),
        options.lease_ms,
        options.max_attempts,
        options.backoff_base_ms,
        options.backoff_cap_ms,
    ) + if options.consumer_deduplicates { " --consumer-deduplicates" } else { "" }
}

/// The faults of a run of the user's relays: [`schedule`]'s kills, pauses and outage, three
/// relays' backends terminated and six relays' broker connections partitioned then cut, at times
/// from the same seed.
pub fn relay_schedule(options: &Options) -> Vec<Disruption> {
    let mut faults = schedule(options);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(options.seed ^ 0xb1ac_b0c5);
    let mut draw = || (300 + rng.gen_range(0..options.fault_span_ms.max(1)), rng.gen_range(0..options.relays));
    for n in 0..6 {
        if options.faults.backend && n < 3 {
            let (at_ms, relay) = draw();
            faults.push(Disruption::Backend { at_ms, relay });
        }
        if options.faults.cut {
            let (at_ms, relay) = draw();
            faults.push(Disruption::Cut { at_ms, relay });
        }
    }
    faults.sort_by_key(Disruption::at);
    faults
}

/// A disruption in words, the relay by its name in the contract.
fn words(d: &Disruption) -> String {
    match d {
        Disruption::Kill { at_ms, relay } => {
            format!("t={} {} killed (SIGKILL to its process group) and started again", secs(*at_ms), relay_name(*relay))
        }
        Disruption::Pause { at_ms, relay, for_ms } => format!(
            "t={} {} paused {} (SIGSTOP, SIGCONT to its process group)",
            secs(*at_ms),
            relay_name(*relay),
            secs(*for_ms)
        ),
        other => other.words(),
    }
}

/// A relay's name in the contract and the history: `relay-1` …
pub fn relay_name(relay: u16) -> String {
    format!("relay-{}", relay + 1)
}

/// Runs the user's relay command `command` as `options.relays` processes over `profile`'s
/// schema; `table` is the outbox table (else the one the profile's enqueue inserts into).
pub fn run_relays(
    options: &Options,
    command: &str,
    profile_path: &Path,
    table: Option<&str>,
    progress: &dyn Fn(&str),
) -> Result<RunReport, String> {
    let profile = Profile::load(profile_path)?;
    let table =
        table.map(str::to_string).or_else(|| insert_table(&profile.file.statements.enqueue)).ok_or_else(|| {
            format!(
                "{}: its enqueue inserts into no table I can name; --table names the outbox table",
                profile_path.display()
            )
        })?;
    let config = crate::store::postgres::check_url(&options.database_url, false).map_err(|e| e.to_string())?;
    let pg_port = config.get_ports().first().copied().unwrap_or(5432);
    let pg_user = config.get_user().unwrap_or("postgres").to_string();
    let pg_password = config.get_password().map(|p| String::from_utf8_lossy(p).into_owned());

    let crate::store::profile::LiveStore { mut store, place, scratch } =
        profile.live(&options.database_url).map_err(|e| format!("PostgreSQL at {}: {e}", options.database_url))?;
    let database = place.database.clone().unwrap_or_default();
    store.set_run(options.max_attempts, Duration(options.lease_ms));
    scratch
        .borrow_mut()
        .client()
        .batch_execute(&format!("SET application_name = '{APP}'; {}", crate::record::install_sql(&table)))
        .map_err(|e| format!("cannot record {table} in the scratch database: {}", crate::store::bind::one_line(&e)))?;

    let base = std::env::temp_dir();
    remove_stale_runs(&base);
    let run = Run::new(base.join(format!("outbox-check-e2e-{}-{}", std::process::id(), options.seed)))?;
    let runtime = nats::runtime();
    let _entered = runtime.enter();
    let queue = format!("outbox-check-e2e-{}-{}", std::process::id(), options.seed);
    let mut broker = start_broker(options, &run, &runtime, &queue)?;
    let _queue = (options.broker == Broker::Rabbitmq)
        .then(|| QueueRemoved { url: options.rabbitmq_url.clone(), queue: queue.clone() });
    let broker_url = broker.url(&options.rabbitmq_url);
    let broker_port: u16 = broker_url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("cannot read the broker's port from {broker_url}"))?;

    let started = std::time::Instant::now();
    let epoch_ms = unix_ms();
    // The consumer: every delivery, recorded and acknowledged.
    let deliveries: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let consuming = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let consumer = {
        let (kind, url, queue, deliveries, consuming) =
            (options.broker, broker_url.clone(), queue.clone(), deliveries.clone(), consuming.clone());
        std::thread::spawn(move || match kind {
            Broker::Nats => consume(&url, epoch_ms, &deliveries, &consuming),
            Broker::Rabbitmq => consume_rabbit(&url, &queue, epoch_ms, &deliveries, &consuming),
        })
    };

    // Every relay process group, killed if the run is interrupted.
    let groups: Arc<Mutex<Vec<i32>>> = Arc::default();
    let _kill_groups = {
        let groups = groups.clone();
        crate::cleanup::on_interrupt(move || {
            for g in groups.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                // SAFETY: kill has no preconditions.
                unsafe {
                    libc::kill(-g, libc::SIGCONT);
                    libc::kill(-g, libc::SIGKILL);
                }
            }
        })
    };
    let pg = std::net::SocketAddr::from(([127, 0, 0, 1], pg_port));
    let to_broker = std::net::SocketAddr::from(([127, 0, 0, 1], broker_port));
    let spawn = |relay: u16, incarnation: u32, db_proxy: Proxy, broker_proxy: Proxy| -> Result<UserRelay, String> {
        let output = run.dir.join(format!("relay-{}-{incarnation}.out", relay + 1));
        let out = std::fs::File::create(&output).map_err(|e| format!("cannot create {}: {e}", output.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let credentials = match &pg_password {
            Some(p) => format!("{pg_user}:{p}"),
            None => pg_user.clone(),
        };
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("OUTBOX_CHECK_RELAY_NAME", relay_name(relay))
            .env("OUTBOX_CHECK_RELAY_ID", (relay + 1).to_string())
            .env(
                "OUTBOX_CHECK_DATABASE_URL",
                format!("postgresql://{credentials}@127.0.0.1:{}/{database}", db_proxy.port),
            )
            .env(
                "OUTBOX_CHECK_JDBC_URL",
                format!(
                    "jdbc:postgresql://127.0.0.1:{}/{database}?user={pg_user}{}",
                    db_proxy.port,
                    pg_password.as_ref().map(|p| format!("&password={p}")).unwrap_or_default()
                ),
            )
            .env("PGHOST", "127.0.0.1")
            .env("PGPORT", db_proxy.port.to_string())
            .env("PGDATABASE", &database)
            .env("PGUSER", &pg_user)
            .env("OUTBOX_CHECK_BROKER", if options.broker == Broker::Nats { "nats" } else { "rabbitmq" })
            .env(
                "OUTBOX_CHECK_BROKER_URL",
                match options.broker {
                    Broker::Nats => format!("nats://127.0.0.1:{}", broker_proxy.port),
                    Broker::Rabbitmq => {
                        let (front, _) = options.rabbitmq_url.rsplit_once('@').unwrap_or(("amqp://guest:guest", ""));
                        format!("{front}@127.0.0.1:{}/%2f", broker_proxy.port)
                    }
                },
            )
            .env("OUTBOX_CHECK_SUBJECT", format!("{}.events", nats::SUBJECT_PREFIX))
            .env("OUTBOX_CHECK_QUEUE", &queue)
            .env("OUTBOX_CHECK_TENANT", "0")
            .env("OUTBOX_CHECK_LEASE_MS", options.lease_ms.to_string())
            .env("OUTBOX_CHECK_MAX_ATTEMPTS", options.max_attempts.to_string())
            .env("OUTBOX_CHECK_BACKOFF_BASE_MS", options.backoff_base_ms.to_string())
            .env("OUTBOX_CHECK_BACKOFF_CAP_MS", options.backoff_cap_ms.to_string())
            .env("OUTBOX_CHECK_BATCH", options.batch.to_string())
            .env("OUTBOX_CHECK_POLL_MS", options.poll_ms.to_string());
        if let Some(p) = &pg_password {
            c.env("PGPASSWORD", p);
        }
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        die_with_parent(&mut c);
        let child = c.spawn().map_err(|e| format!("cannot start the relay command: {e}"))?;
        groups.lock().unwrap_or_else(|p| p.into_inner()).push(child.id() as i32);
        Ok(UserRelay {
            child,
            incarnation,
            started: std::time::Instant::now(),
            paused_until: None,
            database: db_proxy,
            broker: broker_proxy,
            output,
        })
    };
    let mut relays: Vec<UserRelay> = Vec::new();
    for r in 0..options.relays {
        relays.push(spawn(r, 0, Proxy::start(pg)?, Proxy::start(to_broker)?)?);
    }
    // Ports a relay's earlier incarnations used (their proxies are gone with them).
    let mut ports: std::collections::BTreeMap<u16, String> = Default::default();

    let faulty = !options.faults.names().is_empty();
    let upfront = if faulty { options.messages.div_ceil(10) } else { options.messages };
    let enqueue_at = |n: u32| -> u64 {
        if n < upfront {
            0
        } else {
            u64::from(n - upfront) * options.fault_span_ms / u64::from((options.messages - upfront).max(1))
        }
    };
    let mut enqueued = 0u32;
    // Waiting with the budget spent: the design's claim takes it never again.
    let policy = profile.design.policy();
    let stuck = |status: Status, attempts: u32| {
        matches!(status, Status::Pending | Status::Ambiguous) && policy.budget.spent(attempts, options.max_attempts)
    };
    let plan = relay_schedule(options);
    let mut next_fault = 0;
    let mut outage_until: Option<std::time::Instant> = None;
    let mut checked = std::time::Instant::now();
    let mut reaped = std::time::Instant::now();
    let mut exits: Vec<String> = Vec::new();
    let mut claimed_any = false;
    let deadline = std::time::Duration::from_millis(options.deadline_ms);
    let ms = |i: std::time::Instant| i.duration_since(started).as_millis() as u64;
    let sql = |e: crate::store::StoreError| format!("PostgreSQL: {e}");
    loop {
        let now = std::time::Instant::now();
        while next_fault < plan.len() && plan[next_fault].at() <= ms(now) {
            match plan[next_fault] {
                Disruption::Kill { relay, .. } => {
                    let old = &mut relays[relay as usize];
                    old.signal(libc::SIGCONT);
                    old.kill();
                    let incarnation = old.incarnation + 1;
                    for p in old.database.upstream_ports() {
                        ports.insert(p, relay_name(relay));
                    }
                    let fresh = spawn(relay, incarnation, Proxy::start(pg)?, Proxy::start(to_broker)?)?;
                    relays[relay as usize] = fresh;
                }
                Disruption::Pause { relay, for_ms, .. } => {
                    let p = &mut relays[relay as usize];
                    p.signal(libc::SIGSTOP);
                    p.paused_until = Some(now + std::time::Duration::from_millis(for_ms));
                }
                Disruption::Outage { for_ms, .. } => {
                    if let BrokerRun::Nats(server) = &mut broker {
                        server.kill();
                    }
                    outage_until = Some(now + std::time::Duration::from_millis(for_ms));
                }
                Disruption::Backend { relay, .. } => {
                    let mine: Vec<i32> =
                        relays[relay as usize].database.upstream_ports().iter().map(|p| i32::from(*p)).collect();
                    scratch
                        .borrow_mut()
                        .client()
                        .execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY($1) AND datname = current_database()",
                            &[&mine],
                        )
                        .map_err(|e| format!("PostgreSQL: {e}"))?;
                }
                Disruption::Cut { relay, .. } => {
                    // Long enough that a publication in flight meets a client's timeout (the
                    // examples wait half a lease), then the connections reset.
                    relays[relay as usize].broker.partition(options.lease_ms * 6 / 10);
                }
            }
            next_fault += 1;
        }
        for p in relays.iter_mut() {
            if p.paused_until.is_some_and(|t| t <= now) {
                p.signal(libc::SIGCONT);
                p.paused_until = None;
            }
        }
        if outage_until.is_some_and(|t| t <= now) {
            if let BrokerRun::Nats(server) = &mut broker {
                server.restart()?;
                if let Some(pid) = server.pid() {
                    run.children.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
                }
            }
            outage_until = None;
        }
        while enqueued < options.messages && enqueue_at(enqueued) <= ms(now) {
            let req = EnqueueRequest {
                tenant_id: TenantId(0),
                aggregate_id: AggregateId(enqueued),
                expected_version: 0,
                message_id: MessageId(enqueued),
                now: Instant(now_ms(epoch_ms)),
            };
            store.enqueue(&req).map_err(sql)?;
            enqueued += 1;
        }
        if store.can_reap() && now.duration_since(reaped) >= std::time::Duration::from_millis(100) {
            reaped = now;
            store.reap(Instant(now_ms(epoch_ms)), options.max_attempts).map_err(sql)?;
        }
        if now.duration_since(checked) >= std::time::Duration::from_millis(200) {
            checked = now;
            for (r, relay) in relays.iter_mut().enumerate() {
                let Some(status) = relay.child.try_wait().ok().flatten() else { continue };
                let line = last_line(&relay.output);
                let name = relay_name(r as u16);
                if !claimed_any && relay.started.elapsed() < std::time::Duration::from_secs(5) {
                    return Err(format!("the relay command exited at once ({status}) as {name}: {line}"));
                }
                // A relay that died on its own is started again, as a supervisor would.
                exits.push(format!("{name} exited on its own ({status}) and was started again; {line}"));
                for p in relay.database.upstream_ports() {
                    ports.insert(p, name.clone());
                }
                *relay = spawn(r as u16, relay.incarnation + 1, Proxy::start(pg)?, Proxy::start(to_broker)?)?;
            }
            let rows = store.rows().map_err(sql)?;
            claimed_any |= rows.iter().any(|r| r.status != Status::Pending || r.attempts > 0);
            if !claimed_any && started.elapsed() > std::time::Duration::from_secs(20) {
                return Err(format!(
                    "no relay took a row in 20 s: is the relay command reading the contract's environment (docs/relays.md)? relay-1: {}",
                    last_line(&relays[0].output)
                ));
            }
            // A row waiting with its budget spent is never claimed again: the run does not wait
            // for it (it is L1 at the end).
            let remaining = rows.iter().filter(|r| !r.status.is_terminal() && !stuck(r.status, r.attempts)).count()
                + (options.messages - enqueued) as usize;
            let faults_over =
                next_fault == plan.len() && outage_until.is_none() && relays.iter().all(|p| p.paused_until.is_none());
            progress(&format!(
                "{} of {} messages open, {} deliveries, {:.1} s",
                remaining,
                options.messages,
                deliveries.lock().unwrap_or_else(|p| p.into_inner()).len(),
                started.elapsed().as_secs_f64()
            ));
            if (remaining == 0 && faults_over && enqueued == options.messages) || started.elapsed() > deadline {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let elapsed = started.elapsed();

    // Stop: SIGTERM to every group, a moment to finish, then SIGKILL.
    for p in &relays {
        p.signal(libc::SIGCONT);
        p.signal(libc::SIGTERM);
    }
    let stopping = std::time::Instant::now();
    for p in relays.iter_mut() {
        while p.child.try_wait().ok().flatten().is_none() && stopping.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        p.kill();
    }
    for (r, p) in relays.iter().enumerate() {
        for port in p.database.upstream_ports() {
            ports.insert(port, relay_name(r as u16));
        }
    }
    drain(&broker, &runtime, &deliveries);
    consuming.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = consumer.join();
    let deliveries = std::mem::take(&mut *deliveries.lock().unwrap_or_else(|p| p.into_inner()));
    if let BrokerRun::Rabbit { rabbit, queue, .. } = &broker {
        runtime.block_on(rabbit.delete(queue));
    }
    drop(broker);
    drop(relays);

    // The history: the recorder's log, each change named by the relay whose connection made it.
    let name = |app: &str, pid: i32, port: Option<i32>| -> String {
        if let Some(relay) = port.and_then(|p| u16::try_from(p).ok()).and_then(|p| ports.get(&p)) {
            relay.clone()
        } else if app == APP {
            APP.to_string()
        } else {
            format!("pid-{pid}")
        }
    };
    let changes = crate::record::read(scratch.borrow_mut().client(), &profile, &name)
        .map_err(|e| format!("PostgreSQL: cannot read the recorder's log: {e}"))?;
    let recorded = crate::record::history(&profile, options.max_attempts, &changes, Some(APP));
    let mut header = recorded.header.clone();
    header.backoff_base = Some(options.backoff_base_ms);
    header.backoff_cap = Some(options.backoff_cap_ms);
    header.source = Some(format!(
        "outbox-check e2e --relay, seed {}: {} processes of `{command}` on PostgreSQL and {}",
        options.seed,
        options.relays,
        options.broker.name()
    ));
    header.relays = Some((0..options.relays).map(relay_name).chain([APP.to_string()]).collect());
    let text = crate::trace::to_jsonl(&header, &recorded.events);
    let findings = check_history(profile.design, &text)?;

    // The rows as they ended: the last change of each.
    let column = |field: &str| crate::record::column(&profile, field);
    let (status_col, id_col, attempts_col) = (column("status"), column("message_id"), column("attempts"));
    let statuses = profile.statuses.names();
    // Each row's last status (the profile's name for it too) and attempts; none once deleted.
    let mut ended: std::collections::BTreeMap<String, Option<(Status, u64)>> = Default::default();
    let mut named_status: Vec<(Status, String)> = Vec::new();
    for c in &changes {
        let row = c.new.as_ref().or(c.old.as_ref());
        let Some(id) =
            row.and_then(|r| r.get(&id_col)).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
        else {
            continue;
        };
        let now = c.new.as_ref().and_then(|r| {
            let name = r.get(&status_col)?.as_str()?.to_string();
            let status = statuses.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)?;
            if !named_status.iter().any(|(s, _)| *s == status) {
                named_status.push((status, name));
            }
            Some((status, r.get(&attempts_col).and_then(serde_json::Value::as_u64).unwrap_or(0)))
        });
        // A deleted row completed (the design deletes on completion).
        ended.insert(id, if c.op == "DELETE" { Some((Status::Published, 0)) } else { now });
    }
    let shown = |e: &Option<(Status, u64)>| -> String {
        e.map_or_else(
            || "deleted".to_string(),
            |(s, _)| named_status.iter().find(|n| n.0 == s).map_or_else(|| s.as_str().to_string(), |n| n.1.clone()),
        )
    };
    let window = (options.broker == Broker::Nats).then_some(options.duplicate_window_ms);
    let named = name_deliveries(&deliveries, &[], window);
    let delivered = |m: &str| deliveries.iter().any(|d| d.message == m);
    let is = |s: Status| ended.iter().filter(move |(_, e)| e.is_some_and(|e| e.0 == s)).map(|(m, _)| m.clone());
    let published: Vec<String> = is(Status::Published).collect();
    let stuck: Vec<String> = ended
        .iter()
        .filter(|(_, e)| e.is_some_and(|(s, attempts)| stuck(s, u32::try_from(attempts).unwrap_or(u32::MAX))))
        .map(|(m, e)| format!("{m} ({}, {} attempts)", shown(e), e.map_or(0, |e| e.1)))
        .collect();
    let over_budget = over_budget(&deliveries, options.max_attempts);
    let mut broken = findings.broken.clone();
    if !stuck.is_empty() && !broken.iter().any(|b| b == "L1") {
        broken.push("L1".into());
    }
    if !over_budget.is_empty() && !broken.iter().any(|b| b == "S3") {
        broken.push("S3".into());
    }
    let mut faults: Vec<String> = plan.iter().map(words).collect();
    faults.extend(exits);
    let report = RunReport {
        schema: "outbox-check/e2e/v1".into(),
        design: profile.design.name().to_string(),
        broker: options.broker,
        seed: options.seed,
        relays: options.relays,
        messages: options.messages,
        lease_ms: options.lease_ms,
        backoff_ms: [options.backoff_base_ms, options.backoff_cap_ms],
        poll_ms: options.poll_ms,
        max_attempts: options.max_attempts,
        duplicate_window_ms: window,
        publication_span_ms: None,
        publication_span_unbounded: None,
        longest_pause_ms: longest_pause(options),
        faults,
        relay_faults: Vec::new(),
        seconds: elapsed.as_secs_f64(),
        messages_per_second: published.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        events: recorded.events.len(),
        oracle_fails_the_run: findings.oracle.is_some() && findings.oracle_fails_the_run,
        oracle: findings.oracle,
        broken,
        either: findings.either,
        published: published.len(),
        ended: ended.values().fold(Default::default(), |mut counts, e| {
            *counts.entry(shown(e)).or_default() += 1;
            counts
        }),
        delivered_not_published: ended
            .iter()
            .filter(|(m, e)| e.is_some_and(|e| e.0 != Status::Published) && delivered(m))
            .map(|(m, e)| format!("{m} ({})", shown(e)))
            .collect(),
        not_terminal: ended
            .iter()
            .filter(|(_, e)| e.is_some_and(|e| !e.0.is_terminal()))
            .map(|(m, _)| m.clone())
            .collect(),
        published_not_delivered: published.iter().filter(|m| !delivered(m)).cloned().collect(),
        deliveries: deliveries.len(),
        extra_deliveries: named.0,
        deduplicated_by_broker: named.1,
        unlogged_copies: Vec::new(),
        history: None,
        relay_command: Some(command.to_string()),
        stuck,
        over_budget,
        not_judged: NOT_JUDGED.iter().map(|s| s.to_string()).collect(),
        replay: Some(replay_command(options, command, profile_path)),
        consumer_deduplicates: options.consumer_deduplicates,
    };
    let mut report = report;
    if let Some(path) = &options.history {
        std::fs::write(path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        report.history = Some(path.display().to_string());
    } else if !report.passed() {
        let path = base.join(format!("outbox-check-e2e-seed-{}-{}.jsonl", options.seed, std::process::id()));
        if std::fs::write(&path, &text).is_ok() {
            report.history = Some(path.display().to_string());
        }
    }
    drop(store);
    drop(scratch);
    drop(run);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(message: &str, sequence: Option<u64>, at: u64, redelivered: bool) -> Delivery {
        Delivery {
            message: message.into(),
            copy: sequence.map_or_else(|| format!("unnamed copy {at}"), |s| format!("sequence {s}")),
            sequence,
            publication: None,
            stored_ms: CLOCK_OFFSET + at,
            received_ms: CLOCK_OFFSET + at,
            redelivered,
        }
    }

    #[test]
    fn more_stored_copies_than_the_budget_is_s3_and_a_redelivery_is_no_copy() {
        // NATS: a sequence delivered again is one copy; two sequences are two publications.
        let nats = [copy("m1", Some(1), 10, false), copy("m1", Some(1), 20, true), copy("m2", Some(2), 30, false)];
        assert!(over_budget(&nats, 1).is_empty());
        let twice = [copy("m1", Some(1), 10, false), copy("m1", Some(4), 2500, false)];
        assert_eq!(
            over_budget(&twice, 1),
            ["m1: 2 copies stored (t=0.01 s, t=2.50 s), so at least 2 publications against a budget of 1"]
        );
        assert!(over_budget(&twice, 2).is_empty(), "within a budget of 2");
        // RabbitMQ: a redelivery is the copy the consumer had.
        let rabbit = [copy("m1", None, 10, false), copy("m1", None, 20, true)];
        assert!(over_budget(&rabbit, 1).is_empty());
        let rabbit = [copy("m1", None, 10, false), copy("m1", None, 20, false)];
        assert_eq!(over_budget(&rabbit, 1).len(), 1);
    }
}

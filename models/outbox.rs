//! The outbox as a stateright model: the [`World`] of relays, one table, a broker and a clock,
//! explored exhaustively.
//!
//! Every transition is one [`Action`] of the world, which runs the sans-IO relay cycle over the
//! core and checks each operation with the core's auditor; this file adds no outbox rule. After
//! each step the state is [normalised](World::normalise) (time relative to now, tokens and ghost
//! claim numbers by rank, budget counters saturated), so the reachable graph is finite without
//! a bound on time and states that can no longer be told apart collapse.
//!
//! Symmetry. stateright 0.31 applies `symmetry()` only in its DFS and simulation checkers, and
//! only BFS gives shortest counterexamples. The normalisation is applied inside `next_state`
//! instead, so every checker — BFS included — explores the reduced graph, and a BFS path in the
//! reduced graph replays step for step in the unreduced world ([`replay`] renames the relay slots
//! the normalisation exchanged): shortest counterexamples and a reduced complete check from one
//! model. [`OutboxModel::for_safety`] adds the ghost abstractions of the complete safety check,
//! which only ever add violations.
//!
//! Properties: S1–S11 as `always` over the last step's audit; SPEC §7's reachability list as
//! `sometimes`, each paired with the safety property it exercises, so no check passes vacuously.
//! Liveness is checked separately (see [`crate::liveness`]), because stateright's `eventually`
//! is sound only on acyclic paths and this graph has cycles (a quiet tick returns to its state).

use outbox_check::core::{Property as Spec, Situation};
use outbox_check::world::{Abstraction, Action, Event, FleetFacts, World, WorldConfig};
use stateright::{Model, Property};

/// The model: a world configuration; the state is the [`World`].
#[derive(Clone, Debug)]
pub struct OutboxModel {
    pub config: WorldConfig,
    /// Normalise every state (the default). Off, the model is the plain world — bounded by the
    /// configuration's `time_max` — which the tests compare against to show the reductions
    /// change no verdict.
    pub normalise: bool,
    /// `Some(tracked)`: the safety check's model — the abstractions of
    /// [`World::normalise_with`] on, and of the reachability flags only those in the bit mask
    /// `tracked` (in [`REACHABILITY`]'s order) kept in the state. A flag that is not looked at
    /// would only split states.
    pub safety: Option<Abstraction>,
    /// What normalisation needs to know of the fleet, read once.
    facts: FleetFacts,
    /// Set to stop a search: the model then offers no more steps, so the checker drains its
    /// queue and finishes (stateright's own checkers cannot be stopped from outside).
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The situations worth reaching, in the catalogue's order (`outbox_check::core::property`): SPEC
/// §7's reachability list, then the witnesses that the other safety properties could have failed
/// in the run. A safety property whose witness was not reached was not exercised, and is never
/// reported as holding.
pub const REACHABILITY: [Situation; 12] = Situation::ALL;

/// The witness that `safety_id` could have failed: the situation exercising it.
pub fn witness_of(safety_id: &str) -> Option<Situation> {
    Spec::parse(safety_id).and_then(Situation::witness_of)
}

/// The `always` property names, `"S1 no stale terminal write succeeds"` and so on (the catalogue's).
pub const SAFETY_NAMES: [&str; 11] = Spec::SAFETY_NAMES;

/// stateright's conditions are plain function pointers, so there is one per bit of the masks the
/// world keeps (`StepFlags::violated` over the safety properties, `Seen` over the situations):
/// `HOLDS[i]` reads safety property `i`, `REACHED[i]` situation `i`. The tables follow the width
/// of a `u16`, not the catalogue, so a new property or situation needs no line here.
type Condition = fn(&OutboxModel, &World) -> bool;

fn holds<const I: usize>(_: &OutboxModel, s: &World) -> bool {
    s.step.violated & (1 << I) == 0
}

fn reached<const I: usize>(_: &OutboxModel, s: &World) -> bool {
    Situation::ALL.get(I).is_some_and(|situation| s.step.seen.has(*situation))
}

const HOLDS: [Condition; 16] = [
    holds::<0>,
    holds::<1>,
    holds::<2>,
    holds::<3>,
    holds::<4>,
    holds::<5>,
    holds::<6>,
    holds::<7>,
    holds::<8>,
    holds::<9>,
    holds::<10>,
    holds::<11>,
    holds::<12>,
    holds::<13>,
    holds::<14>,
    holds::<15>,
];

const REACHED: [Condition; 16] = [
    reached::<0>,
    reached::<1>,
    reached::<2>,
    reached::<3>,
    reached::<4>,
    reached::<5>,
    reached::<6>,
    reached::<7>,
    reached::<8>,
    reached::<9>,
    reached::<10>,
    reached::<11>,
    reached::<12>,
    reached::<13>,
    reached::<14>,
    reached::<15>,
];

const _: () = assert!(Spec::SAFETY.len() <= HOLDS.len() && Situation::ALL.len() <= REACHED.len());

impl OutboxModel {
    pub fn new(config: WorldConfig) -> OutboxModel {
        OutboxModel { facts: FleetFacts::of(&config), config, normalise: true, safety: None, stop: Default::default() }
    }

    /// The model of the complete safety check: the normalised world with the safety
    /// abstractions, tracking only the reachability flags in the bit mask `tracked`.
    pub fn for_safety(config: WorldConfig, tracked: u16) -> OutboxModel {
        OutboxModel {
            facts: FleetFacts::of(&config),
            config,
            normalise: true,
            safety: Some(Abstraction::tracking(tracked)),
            stop: Default::default(),
        }
    }

    /// The plain world, without reductions; needs a `time_max` to be finite.
    pub fn unreduced(config: WorldConfig) -> OutboxModel {
        OutboxModel { facts: FleetFacts::of(&config), config, normalise: false, safety: None, stop: Default::default() }
    }

    /// The safety property a name belongs to.
    pub fn spec_property(name: &str) -> Option<Spec> {
        SAFETY_NAMES.iter().position(|n| *n == name).map(|i| Spec::SAFETY[i])
    }
}

impl Model for OutboxModel {
    type State = World;
    type Action = Action;

    fn init_states(&self) -> Vec<World> {
        let mut world = World::new(&self.config);
        if self.normalise {
            world.normalise_by(&self.config, &self.facts, self.safety);
        }
        vec![world]
    }

    fn actions(&self, state: &World, actions: &mut Vec<Action>) {
        if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        state.actions(&self.config, actions);
    }

    fn next_state(&self, last: &World, action: Action) -> Option<World> {
        let mut next = last.clone();
        next.advance(&self.config, action);
        if let Some(abstraction) = self.safety {
            next.step.seen.mask(abstraction.tracked);
        }
        if self.normalise {
            next.normalise_after(&self.config, &self.facts, self.safety, action);
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties: Vec<Property<Self>> =
            Spec::SAFETY.iter().zip(HOLDS).map(|(p, holds)| Property::always(p.name(), holds)).collect();
        let tracked = self.safety.map_or(u16::MAX, |a| a.tracked);
        properties.extend(
            Situation::ALL
                .iter()
                .zip(REACHED)
                .filter(|(s, _)| tracked & s.bit() != 0)
                .map(|(s, reached)| Property::sometimes(s.name(), reached)),
        );
        properties
    }
}

/// The explorer's view of the state a path of model actions reaches: the path replayed in the
/// plain world (true times, the fleet's own relays), its table as a table with what the last step
/// changed highlighted, each relay's clock and what it waits on, the broker and the consumer, and
/// what the last step broke.
pub fn state_svg(config: &WorldConfig, actions: &[Action], safety: Option<Abstraction>) -> String {
    use std::fmt::Write as _;
    // The path in the plain world, keeping the last two worlds.
    let mut real = World::new(config);
    let mut before = real.clone();
    let mut last_violations = Vec::new();
    let mut broken: Vec<&'static str> = Vec::new();
    let mut last_text = Vec::new();
    replay_worlds(config, actions, safety, |_, _, was, now, report| {
        for v in &report.violations {
            if !broken.contains(&v.property.id()) {
                broken.push(v.property.id());
            }
        }
        last_text = report.events.iter().map(|e| describe_at(config, now.now, e)).collect();
        last_violations = report.violations;
        before = was.clone();
        real = now.clone();
    });
    let esc = |t: &str| t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let instant = |t: Option<outbox_check::core::Instant>| t.map_or("–".to_string(), |t| t.to_string());
    let mut out = String::new();
    let columns = ["message", "tenant", "status", "attempts", "owner", "token", "lease until", "retry at"];
    let widths = [80, 70, 100, 70, 60, 60, 100, 90];
    let relay_lines: Vec<String> = config
        .relays
        .iter()
        .enumerate()
        .map(|(r, spec)| {
            let clock = if spec.skew == 0 {
                format!("clock t={}", real.now.0)
            } else {
                format!("clock t={} ({:+} ms against true time)", real.now.0 as i64 + spec.skew, spec.skew)
            };
            format!("r{r} ({}, {}): {clock}; {}", spec.design.name(), spec.owner, real.waits(r))
        })
        .collect();
    // Monospace lines as long as they are (about 7.3 px a character at 12 px).
    let longest = relay_lines.iter().chain(&last_text).map(|l| l.chars().count()).max().unwrap_or(0);
    let width: usize = (widths.iter().sum::<usize>() + 20).max(longest * 73 / 10 + 12);
    let rows = real.outbox.rows().len();
    let height = 150
        + 22 * (rows + 1)
        + 20 * config.relays.len()
        + 20 * (2 + last_text.len())
        + 52 * last_violations.len().max(1)
        + 44;
    let _ =
        writeln!(out, "<svg width='{width}' height='{height}' viewBox='0 0 {width} {height}' class='outbox-state'>");
    let _ = writeln!(out, "<style>.h{{font:bold 13px sans-serif}} .c{{font:12px monospace}} .changed{{fill:#ffe27a}} .bad{{fill:#c00;font:bold 12px sans-serif}} .ok{{fill:#262;font:12px sans-serif}}</style>");
    let mut y = 18;
    let _ = writeln!(
        out,
        "<text x='4' y='{y}' class='h'>true time t={} · after {} step{}</text>",
        real.now.0,
        actions.len(),
        if actions.len() == 1 { "" } else { "s" }
    );
    y += 24;
    let _ = writeln!(out, "<text x='4' y='{y}' class='h'>the table</text>");
    y += 18;
    let mut x = 4;
    for (c, w) in columns.iter().zip(widths) {
        let _ = writeln!(out, "<text x='{x}' y='{y}' class='h'>{c}</text>");
        x += w;
    }
    for row in real.outbox.rows() {
        y += 22;
        let was = before.outbox.row(row.message_id);
        let cells_of = |row: &outbox_check::core::Row| {
            [
                row.message_id.to_string(),
                row.tenant_id.to_string(),
                row.status.to_string(),
                row.attempts.to_string(),
                row.lease_owner.map_or("–".to_string(), |o| o.to_string()),
                row.lease_token.0.to_string(),
                instant(row.lease_expires_at),
                instant(row.next_attempt_at),
            ]
        };
        let cells = cells_of(row);
        let old = was.map(cells_of);
        let mut x = 4;
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            let changed = old.as_ref().is_none_or(|o| o[i] != *cell);
            if changed {
                let _ = writeln!(
                    out,
                    "<rect x='{}' y='{}' width='{}' height='18' class='changed' data-field='{}'/>",
                    x - 2,
                    y - 14,
                    w - 4,
                    columns[i]
                );
            }
            let _ = writeln!(out, "<text x='{x}' y='{y}' class='c'>{}</text>", esc(cell));
            x += w;
        }
    }
    y += 30;
    let _ = writeln!(out, "<text x='4' y='{y}' class='h'>the relays (clock: the relay's own, beside true time)</text>");
    for line in &relay_lines {
        y += 20;
        let _ = writeln!(out, "<text x='4' y='{y}' class='c'>{}</text>", esc(line));
    }
    if let Some(lease) = real.rescuer {
        y += 20;
        let _ = writeln!(
            out,
            "<text x='4' y='{y}' class='c'>rescuer: read {}'s expired lease (token {}); about to move it</text>",
            lease.message_id, lease.token.0
        );
    }
    y += 24;
    let stored: Vec<String> = real
        .auditor
        .ghosts()
        .iter()
        .map(|g| {
            format!(
                "m{}: published {} time{}{}",
                g.message_id,
                g.publications_total,
                if g.publications_total == 1 { "" } else { "s" },
                if g.stored { ", stored" } else { "" }
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "<text x='4' y='{y}' class='c'>broker: {}</text>",
        esc(&if stored.is_empty() { "nothing published".to_string() } else { stored.join("; ") })
    );
    y += 20;
    // The consumer deduplicates by idempotency key: one effect per message stored under its id.
    let seen: Vec<String> =
        real.auditor.ghosts().iter().filter(|g| g.stored).map(|g| format!("m{}", g.message_id)).collect();
    let consumer = if seen.is_empty() {
        "nothing delivered".to_string()
    } else {
        format!("has applied {} (one effect per idempotency key)", seen.join(", "))
    };
    let _ = writeln!(out, "<text x='4' y='{y}' class='c'>consumer: {}</text>", esc(&consumer));
    y += 24;
    let _ = writeln!(out, "<text x='4' y='{y}' class='h'>the last step</text>");
    for t in &last_text {
        y += 20;
        let _ = writeln!(out, "<text x='4' y='{y}' class='c'>{}</text>", esc(t));
    }
    y += 20;
    if last_violations.is_empty() {
        let so_far = if broken.is_empty() { "none".to_string() } else { broken.join(", ") };
        let _ = writeln!(out, "<text x='4' y='{y}' class='ok' data-broken='{so_far}'>no property broken by this step (broken on this path so far: {so_far})</text>");
    }
    for v in &last_violations {
        // Long sentences wrap, so the view's width holds them.
        let text = format!("✗ {v} — broken at this state");
        let mut lines = Vec::new();
        let mut line = String::new();
        for word in text.split(' ') {
            if line.len() + word.len() > 100 && !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
        let _ = write!(out, "<text x='4' y='{y}' class='bad' data-violated='{}'>", v.property.id());
        for (i, l) in lines.iter().enumerate() {
            let _ = write!(out, "<tspan x='4' dy='{}'>{}</tspan>", if i == 0 { 0 } else { 16 }, esc(l));
        }
        out.push_str("</text>\n");
        y += 20 + 16 * (lines.len() - 1);
    }
    out.push_str("</svg>\n");
    out
}

/// [`describe`], and where a relay's own skewed clock gave the statement its `now`, the true
/// time beside it — or the story would seem to run backwards.
pub fn describe_at(config: &WorldConfig, true_now: outbox_check::core::Instant, event: &Event) -> String {
    let text = describe(event);
    let (relay, now) = match event {
        Event::Claimed { relay, request, .. } => (*relay, request.now),
        Event::Wrote { relay, request, .. } => (*relay, request.now),
        _ => return text,
    };
    if now == true_now {
        return text;
    }
    let skew = config.relays[usize::from(relay)].skew;
    let runs = if skew >= 0 { format!("{skew} ahead") } else { format!("{} behind", -skew) };
    format!("{text} (r{relay}'s own clock, which runs {runs}: true time t={})", true_now.0)
}

/// One event in plain words: who did what to which row, with token, attempts and now.
pub fn describe(event: &Event) -> String {
    let db = |db: &outbox_check::world::DbFate| db.words();
    match event {
        Event::Enqueued { request, result } => format!(
            "app enqueues {} for {} v{} at t={}: {result}",
            request.message_id, request.aggregate_id, request.expected_version, request.now.0
        ),
        Event::Claimed { relay, request, leases, db: fate } => {
            let got: Vec<String> =
                leases.iter().map(|l| format!("{} token {} attempts {}", l.message_id, l.token, l.attempts)).collect();
            format!(
                "r{relay} claims for {} at now={}: {}{}",
                request.tenant_id,
                request.now.0,
                if got.is_empty() { "nothing".into() } else { got.join(", ") },
                db(fate)
            )
        }
        Event::Published { relay, lease, key, fate } => {
            let key = match key {
                outbox_check::core::IdempotencyKey::Message { message_id } => format!("key {message_id}"),
                outbox_check::core::IdempotencyKey::Other { value } => format!("key {value:#x} (not the message id)"),
            };
            format!("r{relay} publishes {} ({key}): broker {}", lease.message_id, fate.words())
        }
        Event::Wrote { relay, request, result, db: fate, misrouted } => format!(
            "r{relay} {}({}, token {}, attempts {}){} at now={}: {}{}",
            request.kind.name(),
            request.lease.message_id,
            request.lease.token,
            request.lease.attempts,
            if *misrouted { format!(" with {}'s id", request.lease.tenant_id) } else { String::new() },
            request.now.0,
            match result {
                Some(result) => result.to_string(),
                None => "not run".into(),
            },
            db(fate)
        ),
        Event::Finished { relay, message_id, result } => format!("r{relay} reports {message_id}: {}", result.as_str()),
        Event::Crashed { relay } => format!("r{relay} crashes and restarts with nothing in memory"),
        Event::SessionEnded { relay, now, messages } => format!(
            "r{relay}'s session ends at t={}: its lease on {} ends with it",
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::LeaseReleased { relay, message, cleared } => {
            if *cleared {
                format!("r{relay} releases {message}'s lease by its owner id: owner and expiry cleared, status kept")
            } else {
                format!("r{relay} releases {message}'s lease by its owner id: matched nothing")
            }
        }
        Event::LeaseRenewed { relay, until, messages } => format!(
            "r{relay}'s heartbeat renews the lease on {} to t={}",
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", "),
            until.0
        ),
        Event::Scheduled { node, now, messages } => format!(
            "scheduler{} at t={}: {} claimable again (retry time passed)",
            node.map_or(String::new(), |r| format!(" on r{r}'s node, by its clock,")),
            now.0,
            messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
        ),
        Event::Reaped { now, messages } => {
            format!(
                "reaper at t={}: {} exhausted",
                now.0,
                messages.iter().map(|m| m.to_string()).collect::<Vec<_>>().join(", ")
            )
        }
        Event::Ticked { now } => format!("time advances to t={}", now.0),
        Event::Requeued { message_id, result } => format!("operator requeues {message_id}: {result}"),
        Event::RescueRead { now, lease } => format!(
            "rescuer at t={} reads {}'s expired lease (token {}, attempts {})",
            now.0, lease.message_id, lease.token, lease.attempts
        ),
        Event::Rescued { request, result } => format!(
            "rescuer at t={} moves {} to {}{} by {} (fence {}): {result}",
            request.now.0,
            request.lease.message_id,
            request.to,
            request.retry_at.map_or(String::new(), |at| format!(" to retry at t={}", at.0)),
            match request.fence {
                outbox_check::core::ReleaseFence::Expired => "its expiry".to_string(),
                outbox_check::core::ReleaseFence::Token => format!("the token it read, {}", request.lease.token),
                outbox_check::core::ReleaseFence::Id => "id alone".to_string(),
            },
            request.fence.name()
        ),
    }
}

/// One step of a replayed path, in the unnormalised world: real relay ids and real times.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ReplayStep {
    pub index: usize,
    /// The action with the relay named as the fleet names it.
    pub action: Action,
    /// True time after the step.
    pub now: u64,
    pub events: Vec<Event>,
    pub text: Vec<String>,
    pub violations: Vec<Broken>,
}

/// A broken property as a report carries it: the property, and what broke it in the model's
/// words ([`outbox_check::core::Violation::detail`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Broken {
    pub property: outbox_check::core::Property,
    pub detail: String,
}

impl From<&outbox_check::core::Violation> for Broken {
    fn from(v: &outbox_check::core::Violation) -> Broken {
        Broken { property: v.property, detail: v.detail() }
    }
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.property, self.detail)
    }
}

/// Replays a path of model actions in the unnormalised world.
///
/// The model's states are normalised, and normalisation may exchange interchangeable relays, so
/// a path's relay indices name canonical slots. The replay tracks the permutation each step
/// applied and renames the relays back, and runs the real world beside the canonical one, so the
/// steps carry true times and the fleet's own relay names.
pub fn replay(config: &WorldConfig, actions: &[Action]) -> Vec<ReplayStep> {
    replay_with(config, actions, None)
}

/// [`replay`] of a path found under [`World::normalise_with`]`(config, safety)` (whose relay
/// order may differ where the abstractions merged ghost state).
pub fn replay_with(config: &WorldConfig, actions: &[Action], safety: Option<Abstraction>) -> Vec<ReplayStep> {
    let mut steps = Vec::with_capacity(actions.len());
    replay_worlds(config, actions, safety, |index, action, _, real, report| {
        steps.push(ReplayStep {
            index,
            action,
            now: real.now.0,
            text: report.events.iter().map(|e| describe_at(config, real.now, e)).collect(),
            events: report.events,
            violations: report.violations.iter().map(Broken::from).collect(),
        });
    });
    steps
}

/// The plain world along a path of model actions: `each` gets every step's number (from 1), the
/// action with the fleet's own relay, the world before and after it, and what it did. The replay
/// stops before a step the plain world does not offer where it is taken (a path the reductions
/// got wrong): what it shows is then cut short, and `replay::confirm` says it does not replay,
/// instead of the world refusing the step with a panic.
fn replay_worlds(
    config: &WorldConfig,
    actions: &[Action],
    safety: Option<Abstraction>,
    mut each: impl FnMut(usize, Action, &World, &World, outbox_check::world::StepReport),
) {
    let mut canonical = World::new(config);
    let mut real_of = canonical.normalise_with(config, safety);
    let mut real = World::new(config);
    let mut offered = Vec::new();
    for (index, &action) in actions.iter().enumerate() {
        let real_action = rename_relay(action, &real_of);
        offered.clear();
        real.actions(config, &mut offered);
        if !offered.contains(&real_action) {
            break;
        }
        let before = real.clone();
        let report = real.apply(config, real_action);
        canonical.advance(config, action);
        let perm = canonical.normalise_with(config, safety);
        real_of = perm.iter().map(|&old| real_of[old]).collect();
        each(index + 1, real_action, &before, &real, report);
    }
}

fn rename_relay(action: Action, real_of: &[usize]) -> Action {
    let map = |r: u16| real_of.get(r as usize).map(|&x| x as u16).unwrap_or(r);
    match action {
        Action::Poll { relay, db } => Action::Poll { relay: map(relay), db },
        Action::Publish { relay, fate } => Action::Publish { relay: map(relay), fate },
        Action::Write { relay, db } => Action::Write { relay: map(relay), db },
        Action::Crash { relay } => Action::Crash { relay: map(relay) },
        Action::LeaseLost { relay } => Action::LeaseLost { relay: map(relay) },
        Action::Renew { relay } => Action::Renew { relay: map(relay) },
        Action::Schedule { node } => Action::Schedule { node: node.map(map) },
        Action::MisroutedWrite { relay } => Action::MisroutedWrite { relay: map(relay) },
        other => other,
    }
}

//! The one relay driver: performs a cycle's effects on an engine's database and broker and hands
//! each outcome back, from the claim to `Done`.
//!
//! An engine says only how it runs a claim, a publication and a terminal write ([`Effects`]); the
//! loop that asks the [`Cycle`] for its next effect, performs it and feeds the answer back is
//! written here once, for the simulations (madsim tasks), `e2e`'s relay processes, a profile's
//! concurrent run and the PostgreSQL tests. The model checker's world performs each effect as
//! its own step, interleaved with other relays and faults, so it does not loop: it hands each
//! outcome back through [`Cycle::answer`], as this loop does.

use super::{Clocks, Cycle, Effect, Input, PublishOutcome, RelayConfig, Step};
use crate::core::{ClaimRequest, IdempotencyKey, Instant, Lease, WriteRequest, WriteResult};
use std::future::Future;

/// What an engine learnt from performing an effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The claim committed and returned these leases.
    Claimed(Vec<Lease>),
    /// The broker answered the publication.
    Published(PublishOutcome),
    /// The terminal write committed with this result.
    Written(WriteResult),
    /// The database connection died: the statement may or may not have committed.
    ConnectionLost,
}

impl Cycle {
    /// Hands an effect's outcome back: the one place an engine's answer becomes the cycle's input.
    pub fn answer(&mut self, config: &RelayConfig, reply: Reply, clocks: Clocks) -> Step {
        match reply {
            Reply::Claimed(leases) => self.claimed(config, leases, clocks),
            Reply::Published(outcome) => self.resume(config, Input::Published { outcome }, clocks),
            Reply::Written(result) => self.resume(config, Input::Written { result }, clocks),
            Reply::ConnectionLost => self.resume(config, Input::ConnectionLost, clocks),
        }
    }
}

/// How one engine performs a relay's effects. Each may wait (a madsim task sleeps, a process
/// blocks on its socket); an engine whose effects never wait runs the cycle with [`drive_now`].
/// An error ends the relay (a log it cannot write, a server it cannot reach again); a lost
/// connection is not an error but [`Reply::ConnectionLost`].
// The futures are awaited where they are made, never sent across threads, so a `Send` bound
// that `async fn` in a trait cannot state is not needed.
#[allow(async_fn_in_trait)]
pub trait Effects {
    type Error;
    /// The clock readings now (the statement's `now` is taken from them by the design).
    fn clocks(&mut self) -> Clocks;
    /// Runs the claim: [`Reply::Claimed`] or [`Reply::ConnectionLost`].
    async fn claim(&mut self, request: ClaimRequest) -> Result<Reply, Self::Error>;
    /// Publishes a lease's message under `key`: the broker's answer.
    async fn publish(&mut self, lease: Lease, key: IdempotencyKey) -> Result<PublishOutcome, Self::Error>;
    /// Runs the terminal write: [`Reply::Written`] or [`Reply::ConnectionLost`].
    async fn write(&mut self, request: WriteRequest) -> Result<Reply, Self::Error>;
}

/// One cycle of `config`'s relay on `effects`, from its claim to `Done`. Returns how many leases
/// the claim took (0 when it took none or its reply was lost), for the engine's polling.
/// `timer` is the relay process's own retry timer (`retry.timer = "per-process"`; see
/// [`Cycle::start_timed`]): the engine keeps one per relay process, `None` when it starts.
pub async fn drive<E: Effects>(
    config: &RelayConfig,
    timer: &mut Option<Instant>,
    effects: &mut E,
) -> Result<usize, E::Error> {
    let clocks = effects.clocks();
    let (mut cycle, mut effect) = Cycle::start_timed(config, clocks, *timer);
    let mut claimed = 0;
    loop {
        let reply = match effect {
            Effect::Done => return Ok(claimed),
            Effect::Claim { request } => {
                let reply = effects.claim(request).await?;
                if let Reply::Claimed(leases) = &reply {
                    claimed = leases.len();
                    *timer = super::retry_timer_after(config, leases, clocks, *timer);
                }
                reply
            }
            Effect::Publish { lease, key } => Reply::Published(effects.publish(lease, key).await?),
            Effect::Write { request } => effects.write(request).await?,
        };
        effect = cycle.answer(config, reply, effects.clocks()).effect;
    }
}

/// [`drive`] for an engine whose effects never wait (they block the thread instead): the cycle
/// runs to its end on this thread.
pub fn drive_now<E: Effects>(
    config: &RelayConfig,
    timer: &mut Option<Instant>,
    effects: &mut E,
) -> Result<usize, E::Error> {
    let future = std::pin::pin!(drive(config, timer, effects));
    match future.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => {
            panic!("drive_now: an effect of this engine waited; run it with drive in its runtime")
        }
    }
}

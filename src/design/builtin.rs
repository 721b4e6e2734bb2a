//! The built-in designs: the variants of SPEC §5 and the mutants of docs/designs.md, each read
//! from its file under models/designs/ (built into the binary), which is the one place its switches
//! are written. The core never sees this catalogue: a design file's `based_on` is resolved by a
//! lookup passed in ([`DesignFile::resolve`]).

use super::Design;
use crate::core::design_file::DesignFile;
use crate::core::Policy;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The designs of SPEC §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    Reference,
    SeedV2,
    LegacyV1,
    SeedTenant,
}

impl Variant {
    pub const ALL: [Variant; 4] = [Variant::Reference, Variant::SeedV2, Variant::LegacyV1, Variant::SeedTenant];

    pub fn name(self) -> &'static str {
        match self {
            Variant::Reference => "reference",
            Variant::SeedV2 => "seed-v2",
            Variant::LegacyV1 => "legacy-v1",
            Variant::SeedTenant => "seed-tenant",
        }
    }

    pub fn summary(self) -> &'static str {
        match self {
            Variant::Reference => "SPEC §3 and §4: fenced claim and writes, attempts counted at claim, retry clock, reaper",
            Variant::SeedV2 => "seed 000's messaging_outbox V2 as written: fenced, but attempts counted by the AMBIGUOUS write and `now` from the relay",
            Variant::LegacyV1 => "seed 000's V1 leaseBatch path: no owner, no token bump, no retry clock, no budget; writes keyed on message_id",
            Variant::SeedTenant => "seed 003's outbox_events: tenant-scoped SKIP LOCKED claim, attempts < 3 at claim, random tokens, no failed or exhausted state",
        }
    }

    pub fn parse(text: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == text)
    }

    /// The design, from its file under models/designs/ (built into the binary).
    pub fn policy(self) -> Policy {
        static POLICIES: std::sync::OnceLock<[Policy; 4]> = std::sync::OnceLock::new();
        POLICIES.get_or_init(|| Variant::ALL.map(|v| builtin(Design::Variant(v))))[self as usize]
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The mistakes of docs/designs.md's catalogue, each one switch flipped on `reference`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    ClaimNoTokenBump,
    WriteOwnerOnly,
    WriteIdOnly,
    SwallowStale,
    StealLiveLease,
    NoRetryClock,
    NoBudgetPredicate,
    ExhaustOffByOne,
    ClaimTerminal,
    PublishBeforeAck,
    RetryAfterDbLoss,
    FreshIdempotencyKey,
    WriteIgnoresTenant,
    TokenResetOnRequeue,
}

impl Mutant {
    pub const ALL: [Mutant; 14] = [
        Mutant::ClaimNoTokenBump,
        Mutant::WriteOwnerOnly,
        Mutant::WriteIdOnly,
        Mutant::SwallowStale,
        Mutant::StealLiveLease,
        Mutant::NoRetryClock,
        Mutant::NoBudgetPredicate,
        Mutant::ExhaustOffByOne,
        Mutant::ClaimTerminal,
        Mutant::PublishBeforeAck,
        Mutant::RetryAfterDbLoss,
        Mutant::FreshIdempotencyKey,
        Mutant::WriteIgnoresTenant,
        Mutant::TokenResetOnRequeue,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutant::ClaimNoTokenBump => "claim-no-token-bump",
            Mutant::WriteOwnerOnly => "write-owner-only",
            Mutant::WriteIdOnly => "write-id-only",
            Mutant::SwallowStale => "swallow-stale",
            Mutant::StealLiveLease => "steal-live-lease",
            Mutant::NoRetryClock => "no-retry-clock",
            Mutant::NoBudgetPredicate => "no-budget-predicate",
            Mutant::ExhaustOffByOne => "exhaust-off-by-one",
            Mutant::ClaimTerminal => "claim-terminal",
            Mutant::PublishBeforeAck => "publish-before-ack",
            Mutant::RetryAfterDbLoss => "retry-after-db-loss",
            Mutant::FreshIdempotencyKey => "fresh-idempotency-key",
            Mutant::WriteIgnoresTenant => "write-ignores-tenant",
            Mutant::TokenResetOnRequeue => "token-reset-on-requeue",
        }
    }

    /// The mistake, in the catalogue's words (docs/designs.md).
    pub fn mistake(self) -> &'static str {
        match self {
            Mutant::ClaimNoTokenBump => "claim leaves lease_token unchanged",
            Mutant::WriteOwnerOnly => "terminal writes check status and owner, not the token",
            Mutant::WriteIdOnly => "terminal writes keyed on message_id alone",
            Mutant::SwallowStale => "a write that matched no row is reported as applied",
            Mutant::StealLiveLease => "claim takes IN_FLIGHT rows whose lease has not expired",
            Mutant::NoRetryClock => "AMBIGUOUS/retry writes set no next_attempt_at and claim ignores it",
            Mutant::NoBudgetPredicate => "claim omits attempts < max",
            Mutant::ExhaustOffByOne => "the budget check lets one more attempt through (attempts <= max)",
            Mutant::ClaimTerminal => "claim accepts PUBLISHED, FAILED or EXHAUSTED rows",
            Mutant::PublishBeforeAck => "the row is marked PUBLISHED before the broker acknowledged",
            Mutant::RetryAfterDbLoss => {
                "after losing the DB connection post-publish, the relay republishes at once and records PUBLISHED"
            }
            Mutant::FreshIdempotencyKey => "each attempt sends a new idempotency key instead of message_id",
            Mutant::WriteIgnoresTenant => "terminal writes do not check the tenant",
            Mutant::TokenResetOnRequeue => "requeue resets lease_token to 0",
        }
    }

    /// The switch flipped, as its file says it (`write.fence = "message-id-only"`).
    pub fn switch(self) -> String {
        let file = DesignFile::parse(MUTANT_FILES[self as usize]).expect("a built-in file");
        let table: toml::Table = toml::from_str(&file.to_toml()).expect("our own TOML");
        let mut keys = Vec::new();
        for (section, value) in &table {
            if let toml::Value::Table(entries) = value {
                keys.extend(entries.iter().map(|(k, v)| format!("{section}.{k} = {v}")));
            }
        }
        keys.join(", ")
    }

    /// The properties the catalogue expects it to break (the tools must find one of them).
    pub fn expected_kills(self) -> &'static [&'static str] {
        match self {
            Mutant::ClaimNoTokenBump => &["S1", "S2"],
            Mutant::WriteOwnerOnly => &["S1"],
            Mutant::WriteIdOnly => &["S1", "S4"],
            Mutant::SwallowStale => &["S1"],
            Mutant::StealLiveLease => &["S6", "S3"],
            Mutant::NoRetryClock => &["S7", "L2"],
            Mutant::NoBudgetPredicate => &["S3"],
            Mutant::ExhaustOffByOne => &["S3", "L1"],
            Mutant::ClaimTerminal => &["S4"],
            Mutant::PublishBeforeAck => &["S5"],
            Mutant::RetryAfterDbLoss => &["S3", "S5", "S7"],
            Mutant::FreshIdempotencyKey => &["S8"],
            Mutant::WriteIgnoresTenant => &["S9"],
            Mutant::TokenResetOnRequeue => &["S2", "S1"],
        }
    }

    pub fn parse(text: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == text)
    }

    /// `reference` with this one switch flipped, from its file under models/designs/mutants/.
    pub fn policy(self) -> Policy {
        static POLICIES: std::sync::OnceLock<[Policy; 14]> = std::sync::OnceLock::new();
        POLICIES.get_or_init(|| Mutant::ALL.map(|m| builtin(Design::Mutant(m))))[self as usize]
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The built-in designs' files, in [`Variant::ALL`]'s and [`Mutant::ALL`]'s order.
const VARIANT_FILES: [&str; 4] = [
    include_str!("../../models/designs/reference.toml"),
    include_str!("../../models/designs/seed-v2.toml"),
    include_str!("../../models/designs/legacy-v1.toml"),
    include_str!("../../models/designs/seed-tenant.toml"),
];
const MUTANT_FILES: [&str; 14] = [
    include_str!("../../models/designs/mutants/claim-no-token-bump.toml"),
    include_str!("../../models/designs/mutants/write-owner-only.toml"),
    include_str!("../../models/designs/mutants/write-id-only.toml"),
    include_str!("../../models/designs/mutants/swallow-stale.toml"),
    include_str!("../../models/designs/mutants/steal-live-lease.toml"),
    include_str!("../../models/designs/mutants/no-retry-clock.toml"),
    include_str!("../../models/designs/mutants/no-budget-predicate.toml"),
    include_str!("../../models/designs/mutants/exhaust-off-by-one.toml"),
    include_str!("../../models/designs/mutants/claim-terminal.toml"),
    include_str!("../../models/designs/mutants/publish-before-ack.toml"),
    include_str!("../../models/designs/mutants/retry-after-db-loss.toml"),
    include_str!("../../models/designs/mutants/fresh-idempotency-key.toml"),
    include_str!("../../models/designs/mutants/write-ignores-tenant.toml"),
    include_str!("../../models/designs/mutants/token-reset-on-requeue.toml"),
];

impl Design {
    /// The text of a built-in design's file.
    pub fn builtin_file(self) -> Option<&'static str> {
        match self {
            Design::Variant(v) => Some(VARIANT_FILES[v as usize]),
            Design::Mutant(m) => Some(MUTANT_FILES[m as usize]),
            Design::Custom(_) => None,
        }
    }
}

/// A built-in design's policy from its file: a variant's file lists every key, a mutant's starts
/// from `reference`. A bad built-in file is a bug of this build (tests/design_files.rs reads
/// every one).
fn builtin(design: Design) -> Policy {
    let text = design.builtin_file().expect("a built-in design");
    let file = DesignFile::parse(text).unwrap_or_else(|e| panic!("models/designs: {}: {e}", design.name()));
    assert_eq!(file.name, design.name(), "a built-in file names its design");
    file.resolve(&|name| Design::parse(name).map(Design::policy))
        .unwrap_or_else(|e| panic!("models/designs: {}: {e}", design.name()))
}

//! Benchmark (ignored by default): claim throughput of four concurrent relays on PostgreSQL.
//! `OUTBOX_CHECK_PG_URL=... cargo test --release --test pg_bench -- --ignored --nocapture`
//! Figures go to reports/bench.md beside pgbench's TPS on the same server.

use outbox_check::core::{AggregateId, EnqueueRequest, Instant, MessageId, TenantId};
use outbox_check::design::Variant;
use outbox_check::store::bind::{message_name, owner_name, tenant_name};
use outbox_check::store::postgres::Scratch;
use outbox_check::store::sql::{self, Dialect};
use outbox_check::store::{PgStore, Store};

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn claim_throughput_of_four_relays() {
    let Ok(url) = std::env::var("OUTBOX_CHECK_PG_URL") else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "NOT RUN: the PostgreSQL benchmark needs OUTBOX_CHECK_PG_URL");
        return;
    };
    const MESSAGES: u32 = 20_000;
    const BATCH: i64 = 10;
    let policy = Variant::Reference.policy();
    let mut setup = PgStore::connect(&url, false, policy).expect("the server answers");
    for n in 0..MESSAGES {
        let req = EnqueueRequest {
            tenant_id: TenantId(0),
            aggregate_id: AggregateId(n),
            expected_version: 0,
            message_id: MessageId(n),
            now: Instant(u64::from(n)),
        };
        setup.enqueue(&req).unwrap();
    }
    setup.scratch().client().batch_execute("VACUUM ANALYZE messaging_outbox").unwrap();
    let schema = setup.scratch().schema().to_string();
    let select = sql::claim_select(Dialect::Postgres, &policy);
    let update = sql::claim_update(Dialect::Postgres, &policy);
    let publish = sql::write(Dialect::Postgres, &policy, outbox_check::core::WriteKind::Published);
    let started = std::time::Instant::now();
    let claims = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for r in 0..4u16 {
            let (url, schema, select, update, publish, claims) = (&url, &schema, &select, &update, &publish, &claims);
            scope.spawn(move || {
                let mut db = Scratch::attach(url, false, schema).unwrap();
                let now = 1_000_000i64;
                loop {
                    let mut tx = db.client().transaction().unwrap();
                    let ids: Vec<String> = tx
                        .query(select, &[&tenant_name(TenantId(0)), &now, &3i32, &BATCH])
                        .unwrap()
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    if ids.is_empty() {
                        break;
                    }
                    let mut tokens = Vec::new();
                    for id in &ids {
                        let row = tx
                            .query_one(
                                update,
                                &[id, &(now + 30_000), &owner_name(outbox_check::core::RelayId(r)), &0i64, &now],
                            )
                            .unwrap();
                        tokens.push(row.get::<_, i64>(1));
                    }
                    tx.commit().unwrap();
                    claims.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    for (id, token) in ids.iter().zip(tokens) {
                        let applied = db
                            .client()
                            .query_opt(
                                publish.as_str(),
                                &[
                                    id,
                                    &tenant_name(TenantId(0)),
                                    &owner_name(outbox_check::core::RelayId(r)),
                                    &token,
                                    &now,
                                    &None::<String>,
                                    &3i32,
                                    &1000i64,
                                    &60_000i64,
                                    &1i32,
                                ],
                            )
                            .unwrap();
                        assert!(applied.is_some(), "{id}: own fresh write refused");
                    }
                }
            });
        }
    });
    let seconds = started.elapsed().as_secs_f64();
    let published: i64 = setup
        .scratch()
        .client()
        .query_one("SELECT count(*) FROM messaging_outbox WHERE status = 'PUBLISHED'", &[])
        .unwrap()
        .get(0);
    assert_eq!(published, i64::from(MESSAGES));
    let _ = message_name(MessageId(0));
    println!(
        "4 relays, batch {BATCH}: {MESSAGES} messages claimed and marked published in {seconds:.2} s: {:.0} messages/s, {:.0} claim transactions/s",
        f64::from(MESSAGES) / seconds,
        claims.load(std::sync::atomic::Ordering::Relaxed) as f64 / seconds
    );
}

//! The SQLite schemas: applied in order, recorded, and a populated V1 table becomes V2 with
//! every row kept and the V2 invariants enforced.

use outbox_check::store::migrate::{applied_sqlite, migrate_sqlite, SQLITE};
use rusqlite::Connection;

/// Every row's id, status and attempts, in id order.
fn rows(conn: &Connection) -> Vec<(String, String, i64)> {
    conn.prepare("SELECT message_id, status, attempts FROM messaging_outbox ORDER BY message_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn a_populated_v1_table_migrates_to_v2_keeping_every_row() {
    let mut conn = Connection::open_in_memory().unwrap();
    assert_eq!(migrate_sqlite(&mut conn, 1).unwrap(), [1]);
    for i in 0..50 {
        let status = ["PENDING", "IN_FLIGHT", "PUBLISHED", "AMBIGUOUS", "FAILED"][i % 5];
        conn.execute(
            "INSERT INTO messaging_outbox (message_id, tenant_id, aggregate_id, aggregate_version, status, attempts, lease_expires_at, created_at)
             VALUES (?1, 't', ?2, 1, ?3, ?4, ?5, ?6)",
            (format!("m{i}"), format!("a{i}"), status, (i % 3) as i64, (i as i64) * 10, i as i64),
        )
        .unwrap();
    }
    // V1 knows no EXHAUSTED.
    assert!(conn
        .execute("INSERT INTO messaging_outbox (message_id, tenant_id, aggregate_id, aggregate_version, status, created_at) VALUES ('x', 't', 'a', 1, 'EXHAUSTED', 0)", [])
        .is_err());
    let before = rows(&conn);

    assert_eq!(migrate_sqlite(&mut conn, 3).unwrap(), [2, 3]);
    assert_eq!(applied_sqlite(&conn).unwrap(), [1, 2, 3]);
    assert!(migrate_sqlite(&mut conn, 3).unwrap().is_empty(), "applied once");

    assert_eq!(rows(&conn), before, "every row kept");
    let tokens: i64 = conn.query_row("SELECT SUM(lease_token) FROM messaging_outbox", [], |r| r.get(0)).unwrap();
    assert_eq!(tokens, 0, "tokens start at 0");
    // V2 knows EXHAUSTED and refuses a negative token.
    conn.execute("UPDATE messaging_outbox SET status = 'EXHAUSTED' WHERE message_id = 'm0'", []).unwrap();
    assert!(conn.execute("UPDATE messaging_outbox SET lease_token = -1 WHERE message_id = 'm1'", []).is_err());
    // The claim's order is served by the partial index.
    let plan: String = conn
        .query_row(
            "EXPLAIN QUERY PLAN SELECT message_id FROM messaging_outbox
             WHERE tenant_id = 't' AND status IN ('PENDING', 'AMBIGUOUS', 'IN_FLIGHT')
             ORDER BY COALESCE(next_attempt_at, created_at), message_id LIMIT 5",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("ix_messaging_outbox_due"), "{plan}");
    assert!(!plan.contains("TEMP B-TREE"), "the claim sorts the table: {plan}");
}

#[test]
fn migrations_are_numbered_in_order() {
    let versions: Vec<u32> = SQLITE.iter().map(|m| m.version).collect();
    assert_eq!(versions, (1..=SQLITE.len() as u32).collect::<Vec<_>>());
}

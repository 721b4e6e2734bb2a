//! PostgreSQL, on the server `OUTBOX_CHECK_PG_URL` names. Without it these tests print NOT RUN
//! and pass — unless `OUTBOX_CHECK_REQUIRE_PG=1` (set by .ci/run), when its absence fails them.

use outbox_check::store::postgres::{check_url, PgError, Scratch};

mod common;

fn url() -> Option<String> {
    common::pg_url("PostgreSQL tests")
}

#[test]
fn a_populated_v1_table_migrates_to_v2_in_a_scratch_schema_that_is_dropped() {
    let Some(url) = url() else { return };
    let mut db = Scratch::connect(&url, false).expect("the server answers");
    let schema = db.schema().to_string();
    assert_eq!(db.migrate(1).unwrap(), [1]);
    for i in 0..50i64 {
        let status = ["PENDING", "IN_FLIGHT", "PUBLISHED", "AMBIGUOUS", "FAILED"][i as usize % 5];
        db.client()
            .execute(
                "INSERT INTO messaging_outbox (message_id, tenant_id, aggregate_id, aggregate_version, status, attempts, created_at)
                 VALUES ($1, 't', $2, 1, $3, $4, $5)",
                &[&format!("m{i}"), &format!("a{i}"), &status, &((i % 3) as i32), &i],
            )
            .unwrap();
    }
    let rows = |db: &mut Scratch| -> Vec<(String, String, i32)> {
        db.client()
            .query("SELECT message_id, status, attempts FROM messaging_outbox ORDER BY message_id", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    };
    let before = rows(&mut db);
    assert_eq!(db.migrate(3).unwrap(), [2, 3]);
    assert!(db.migrate(3).unwrap().is_empty());
    assert_eq!(rows(&mut db), before, "every row kept");
    assert!(db.client().execute("UPDATE messaging_outbox SET lease_token = -1 WHERE message_id = 'm1'", &[]).is_err());
    db.client().execute("UPDATE messaging_outbox SET status = 'EXHAUSTED' WHERE message_id = 'm0'", &[]).unwrap();
    drop(db);
    let mut other = postgres::Config::from_str_checked(&url);
    let exists: i64 = other
        .query_one("SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", &[&schema])
        .unwrap()
        .get(0);
    assert_eq!(exists, 0, "the scratch schema is dropped");
}

trait Connect {
    fn from_str_checked(url: &str) -> postgres::Client;
}

impl Connect for postgres::Config {
    fn from_str_checked(url: &str) -> postgres::Client {
        check_url(url, false).unwrap().connect(postgres::NoTls).unwrap()
    }
}

#[test]
fn a_non_loopback_host_is_refused_before_any_connection() {
    let refused = check_url("postgresql://postgres@db.example.internal:5432/prod", false);
    assert!(matches!(refused, Err(PgError::NotLoopback(ref h)) if h == "db.example.internal"), "{refused:?}");
    assert!(check_url("postgresql://postgres@db.example.internal:5432/prod", true).is_ok());
    assert!(check_url("postgresql://postgres@127.0.0.1:5432/test", false).is_ok());
    assert!(matches!(check_url("not a url at all ://", false), Err(PgError::BadUrl(_))));
}

//! Shared by the PostgreSQL tests: the server's URL, or a NOT RUN line (a failure instead under
//! `OUTBOX_CHECK_REQUIRE_PG=1`, as .ci/run sets).

pub fn pg_url(what: &str) -> Option<String> {
    match std::env::var("OUTBOX_CHECK_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("OUTBOX_CHECK_REQUIRE_PG").as_deref() != Ok("1"),
                "OUTBOX_CHECK_REQUIRE_PG=1 but OUTBOX_CHECK_PG_URL is not set"
            );
            println!("NOT RUN: {what} need OUTBOX_CHECK_PG_URL (e.g. postgresql://postgres@127.0.0.1:5432/test)");
            None
        }
    }
}

//! A queue's own parameter names: sqlc's syntax read as named parameters, and `[parameters]`,
//! which maps the names a queue's statements use onto the run's (`max_to_lock = ":batch"`) or
//! onto a constant its code passes (`queue = "default"`), for every statement or for one
//! (docs/sql-profile.md, "A queue's own parameters").

use super::V;
use std::collections::BTreeMap;

/// sqlc's parameter syntax as the plain named parameters it stands for, so statements copied
/// from a `queries.sql` run as written: `@name` and `sqlc.arg(name)` / `sqlc.narg('name')` are
/// `:name`; `sqlc.embed(t)` is `t.*` (sqlc expands it into the table's columns the same way).
/// String literals, quoted names and comments are left alone, and so are PostgreSQL's
/// operators `@>`, `<@`, `@@` and `@-@`.
pub fn expand_sqlc(sql: &str) -> String {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < bytes.len() {
        let c = bytes[i];
        let rest = &sql[i..];
        // Quoted text and comments are copied through whole.
        let skip = match c {
            b'\'' | b'"' => bytes[i + 1..].iter().position(|b| *b == c).map_or(bytes.len(), |p| i + 2 + p),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                bytes[i..].iter().position(|b| *b == b'\n').map_or(bytes.len(), |p| i + p)
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => rest.find("*/").map_or(bytes.len(), |p| i + p + 2),
            _ => i,
        };
        if skip > i {
            out.push_str(&sql[i..skip]);
            i = skip;
            continue;
        }
        let word_start = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b'.';
        if word_start && rest.len() > 5 && rest[..5].eq_ignore_ascii_case("sqlc.") {
            let lower = rest.to_ascii_lowercase();
            let expanded = [("sqlc.arg(", false), ("sqlc.narg(", false), ("sqlc.embed(", true)]
                .into_iter()
                .find(|(m, _)| lower.starts_with(m))
                .and_then(|(m, embed)| {
                    let close = rest.find(')')?;
                    let name = rest[m.len()..close].trim().trim_matches(['\'', '"']).trim();
                    (!name.is_empty() && name.bytes().all(ident))
                        .then(|| (if embed { format!("{name}.*") } else { format!(":{name}") }, close + 1))
                });
            if let Some((text, len)) = expanded {
                out.push_str(&text);
                i += len;
                continue;
            }
        }
        if c == b'@'
            && bytes.get(i + 1).is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_')
            && (i == 0 || !(ident(bytes[i - 1]) || matches!(bytes[i - 1], b'<' | b'@')))
        {
            out.push(':');
            i += 1;
            continue;
        }
        let ch = rest.chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// River's `sqlctemplate` markers, `/* TEMPLATE: name */`, replaced by the text `[templates]`
/// gives the name (River's schema prefix: `schema = ""` for its default schema), everywhere —
/// inside string literals too, as River's replacer does (`nextval('/* TEMPLATE: schema */…')`).
/// The names with no text given are returned instead.
pub fn expand_templates(sql: &str, given: &BTreeMap<String, String>, place: Place) -> Result<String, Vec<String>> {
    let mut text = river_markers(sql, given)?;
    // A template's text may hold templates (Graphile Worker's `queueClause` holds
    // `${escapedWorkerSchema}`): replaced until nothing changes, a few rounds at most.
    for _ in 0..8 {
        let next = code_markers(&river_markers(&text, given)?, given, place);
        if next == text {
            return Ok(text);
        }
        text = next;
    }
    Err(vec![format!("{} (its text keeps naming templates)", given.keys().cloned().collect::<Vec<_>>().join(", "))])
}

/// Where a text with placeholders is: a statement, or the schema (DDL, a migration file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Statement,
    Schema,
}

/// River's `/* TEMPLATE: name */`: every one must be given.
fn river_markers(sql: &str, given: &BTreeMap<String, String>) -> Result<String, Vec<String>> {
    const OPEN: &str = "/* TEMPLATE: ";
    let mut out = String::with_capacity(sql.len());
    let mut missing = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find(OPEN) {
        let Some(close) = rest[at..].find("*/") else { break };
        let name = rest[at + OPEN.len()..at + close].trim();
        out.push_str(&rest[..at]);
        match given.get(name) {
            Some(text) => out.push_str(text),
            None => {
                if !missing.iter().any(|m| m == name) {
                    missing.push(name.to_string());
                }
            }
        }
        rest = &rest[at + close + 2..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

/// The placeholders a queue's code fills in: a JavaScript template literal's `${name}` and a
/// migrator's `:NAME` (Graphile Worker's `:GRAPHILE_WORKER_SCHEMA`), each where `[templates]`
/// gives the name; any other is left as written (`::text` is a cast). `:NAME` only in the schema:
/// in a statement `:name` is a parameter.
fn code_markers(sql: &str, given: &BTreeMap<String, String>, place: Place) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find(['$', ':']) {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        // A cast's `::` is one token: `):::NAME` is a cast to a type in the schema :NAME
        // stands for (Graphile Worker's `:::GRAPHILE_WORKER_SCHEMA.job_spec`).
        if let Some(after) = tail.strip_prefix("::") {
            out.push_str("::");
            rest = after;
            continue;
        }
        let (name, skip) = if let Some(inner) = tail.strip_prefix("${") {
            match inner.find('}') {
                Some(end) if inner[..end].chars().all(word) => (&inner[..end], end + 3),
                _ => ("", 0),
            }
        } else if place == Place::Schema && tail.starts_with(':') {
            let end = tail[1..].find(|c: char| !word(c)).unwrap_or(tail.len() - 1);
            (&tail[1..1 + end], end + 1)
        } else {
            ("", 0)
        };
        match given.get(name).filter(|_| !name.is_empty()) {
            Some(text) => {
                out.push_str(text);
                rest = &tail[skip..];
            }
            None => {
                out.push_str(&tail[..1]);
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// What a queue's parameter is given: one of the run's values, or a constant.
#[derive(Clone, Debug, PartialEq)]
pub enum Given {
    /// The run's value of this name (`":batch"` → `batch`).
    Ours(String),
    Constant(V),
    /// A TOML array: a composite value's fields in order (underway's `retry_policy`), or an
    /// array's elements; each a constant or one of the run's values.
    List(Vec<Given>),
    /// `{ json = … }`: a JSON document built around the run's values (Graphile Worker's failure
    /// write takes `[{"jobId": …, "message": …}]`), bound as its text.
    Json(Vec<JsonPart>),
}

/// A JSON document read from TOML, in document order: its punctuation and constants as text,
/// and the run's values to put where `":name"` stood.
#[derive(Clone, Debug, PartialEq)]
pub enum JsonPart {
    Text(String),
    Ours(String),
}

/// `[parameters]` read: names for every statement, and names for one statement.
#[derive(Clone, Debug, Default)]
pub struct Parameters {
    every: BTreeMap<String, Given>,
    by_statement: BTreeMap<String, BTreeMap<String, Given>>,
}

impl Parameters {
    /// Reads `[parameters]`; every problem one line, naming the key.
    pub fn read(table: &BTreeMap<String, toml::Value>, statements: &[&str], shown: &str) -> (Parameters, Vec<String>) {
        let mut parameters = Parameters::default();
        let mut problems = Vec::new();
        for (name, value) in table {
            match value {
                toml::Value::Table(inner) if statements.contains(&name.as_str()) => {
                    let mut one = BTreeMap::new();
                    for (n, v) in inner {
                        // `[parameters.mark_retry.2]`: the second statement of a write's list.
                        if let (toml::Value::Table(part), Ok(k)) = (v, n.parse::<u32>()) {
                            let mut own = BTreeMap::new();
                            for (pn, pv) in part {
                                read_one(&mut own, pn, pv, &format!("{shown}: parameters.{name}.{k}.{pn}"), &mut problems);
                            }
                            parameters.by_statement.insert(format!("{name}.{k}"), own);
                            continue;
                        }
                        read_one(&mut one, n, v, &format!("{shown}: parameters.{name}.{n}"), &mut problems);
                    }
                    parameters.by_statement.insert(name.clone(), one);
                }
                toml::Value::Table(_) => problems.push(format!(
                    "{shown}: parameters.{name}: a table of parameters for one statement, and {name} is not a statement (one of {})",
                    statements.join(", ")
                )),
                v => read_one(&mut parameters.every, name, v, &format!("{shown}: parameters.{name}"), &mut problems),
            }
        }
        (parameters, problems)
    }

    /// What `[parameters]` gives the parameter `name` of statement `key`: the statement's own
    /// table first, then the names for every statement.
    pub fn given(&self, key: &str, name: &str) -> Option<&Given> {
        // A write's N-th statement (`mark_retry.2`): its own table, then the write's.
        let write = key.rsplit_once('.').map(|(write, _)| write);
        self.by_statement
            .get(key)
            .and_then(|t| t.get(name))
            .or_else(|| write.and_then(|w| self.by_statement.get(w)).and_then(|t| t.get(name)))
            .or_else(|| self.every.get(name))
    }

    /// Every name `[parameters]` gives, with the statement it is for (`None`: every one).
    pub fn names(&self) -> impl Iterator<Item = (Option<&str>, &str)> {
        self.every
            .keys()
            .map(|n| (None, n.as_str()))
            .chain(self.by_statement.iter().flat_map(|(k, t)| t.keys().map(move |n| (Some(k.as_str()), n.as_str()))))
    }
}

/// One name of `[parameters]` read into `into`, or its problem (`at` names it) kept.
fn read_one(into: &mut BTreeMap<String, Given>, name: &str, value: &toml::Value, at: &str, problems: &mut Vec<String>) {
    match given(value) {
        Ok(g) => {
            into.insert(name.to_string(), g);
        }
        Err(e) => problems.push(format!("{at}: {e}")),
    }
}

/// A value of `[parameters]`: `":name"` is the run's value of that name and `":null"` SQL's
/// NULL (`"::x"` is the text `:x`); any other string, an integer, a float, a boolean or a
/// date-time is a constant; an array holds the fields of a composite value or an array's
/// elements.
fn given(value: &toml::Value) -> Result<Given, String> {
    Ok(match value {
        toml::Value::String(s) if s == ":null" => Given::Constant(V::Null),
        toml::Value::String(s) if s.starts_with("::") => Given::Constant(V::Text(s[1..].to_string())),
        toml::Value::String(s) if s.starts_with(':') => Given::Ours(s[1..].to_string()),
        toml::Value::String(s) => Given::Constant(V::Text(s.clone())),
        toml::Value::Integer(i) => Given::Constant(V::Int(*i)),
        toml::Value::Float(f) => Given::Constant(V::Float(*f)),
        toml::Value::Boolean(b) => Given::Constant(V::Bool(*b)),
        toml::Value::Datetime(d) => Given::Constant(V::At(micros_since_2000(d)?)),
        toml::Value::Table(t) if t.len() == 1 && t.contains_key("json") => {
            let mut parts = Vec::new();
            json_parts(&t["json"], &mut parts)?;
            Given::Json(parts)
        }
        toml::Value::Array(items) => Given::List(
            items
                .iter()
                .map(|item| match item {
                    toml::Value::Array(_) | toml::Value::Table(_) => {
                        Err("an array inside an array is not a parameter's value".to_string())
                    }
                    other => given(other),
                })
                .collect::<Result<_, _>>()?,
        ),
        other => {
            return Err(format!(
                "{} is not a parameter's value: \":name\" for the run's value of :name, \":null\", a constant (text, a number, a boolean, a date-time, an array of them), or {{ json = … }}",
                other.type_str()
            ))
        }
    })
}

/// A `{ json = … }` value's parts: a string `":name"` is the run's value (`":null"` JSON's
/// null, `"::x"` the string `:x`); everything else is written as JSON writes it.
fn json_parts(value: &toml::Value, parts: &mut Vec<JsonPart>) -> Result<(), String> {
    let text = |parts: &mut Vec<JsonPart>, t: String| match parts.last_mut() {
        Some(JsonPart::Text(last)) => last.push_str(&t),
        _ => parts.push(JsonPart::Text(t)),
    };
    match value {
        toml::Value::String(s) if s == ":null" => text(parts, "null".into()),
        toml::Value::String(s) if s.starts_with("::") => text(parts, serde_json::Value::from(&s[1..]).to_string()),
        toml::Value::String(s) if s.starts_with(':') => parts.push(JsonPart::Ours(s[1..].to_string())),
        toml::Value::String(s) => text(parts, serde_json::Value::from(s.as_str()).to_string()),
        toml::Value::Integer(i) => text(parts, i.to_string()),
        toml::Value::Float(f) => {
            text(parts, serde_json::Number::from_f64(*f).ok_or("a JSON number is finite")?.to_string())
        }
        toml::Value::Boolean(b) => text(parts, b.to_string()),
        toml::Value::Datetime(d) => text(parts, serde_json::Value::from(d.to_string()).to_string()),
        toml::Value::Array(items) => {
            text(parts, "[".into());
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    text(parts, ",".into());
                }
                json_parts(item, parts)?;
            }
            text(parts, "]".into());
        }
        toml::Value::Table(fields) => {
            text(parts, "{".into());
            for (i, (k, v)) in fields.iter().enumerate() {
                text(parts, format!("{}{}:", if i > 0 { "," } else { "" }, serde_json::Value::from(k.as_str())));
                json_parts(v, parts)?;
            }
            text(parts, "}".into());
        }
    }
    Ok(())
}

/// One of the run's values as JSON: a number, a string, null, an array; a time or a duration as
/// its number of the model's milliseconds.
fn json_of(v: &V) -> String {
    match v {
        V::Null => "null".into(),
        V::Int(i) | V::At(i) => i.to_string(),
        V::Time(ms) | V::Span(ms) | V::Horizon(ms) | V::Seconds(ms) => ms.to_string(),
        V::Float(f) => serde_json::Number::from_f64(*f).map_or("null".into(), |n| n.to_string()),
        V::Bool(b) => b.to_string(),
        V::Text(t) | V::Other(t) => serde_json::Value::from(t.as_str()).to_string(),
        V::List(items) => format!("[{}]", items.iter().map(json_of).collect::<Vec<_>>().join(",")),
    }
}

impl Given {
    /// The run's names this value reads.
    pub fn ours(&self) -> Vec<&str> {
        match self {
            Given::Ours(name) => vec![name.as_str()],
            Given::Constant(_) => Vec::new(),
            Given::List(items) => items.iter().flat_map(Given::ours).collect(),
            Given::Json(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    JsonPart::Ours(name) => Some(name.as_str()),
                    JsonPart::Text(_) => None,
                })
                .collect(),
        }
    }

    /// The value, with the run's values looked up by `ours` (`None` where one is missing).
    pub fn value(&self, ours: &dyn Fn(&str) -> Option<V>) -> Option<V> {
        match self {
            Given::Ours(name) => ours(name),
            Given::Constant(v) => Some(v.clone()),
            Given::List(items) => items.iter().map(|i| i.value(ours)).collect::<Option<Vec<V>>>().map(V::List),
            Given::Json(parts) => {
                let mut out = String::new();
                for part in parts {
                    match part {
                        JsonPart::Text(t) => out.push_str(t),
                        JsonPart::Ours(name) => out.push_str(&json_of(&ours(name)?)),
                    }
                }
                Some(V::Text(out))
            }
        }
    }
}

/// A TOML date-time as PostgreSQL's microseconds since 2000-01-01 00:00 UTC (a date alone is its
/// midnight; an offset is applied; a time without an offset is UTC).
fn micros_since_2000(d: &toml::value::Datetime) -> Result<i64, String> {
    let date = d.date.ok_or_else(|| format!("{d} has no date"))?;
    let days =
        days_from_civil(i64::from(date.year), i64::from(date.month), i64::from(date.day)) - days_from_civil(2000, 1, 1);
    let (mut seconds, mut micros) = (days * 86_400, 0i64);
    if let Some(t) = d.time {
        seconds += i64::from(t.hour) * 3600 + i64::from(t.minute) * 60 + i64::from(t.second);
        micros = i64::from(t.nanosecond) / 1000;
    }
    if let Some(toml::value::Offset::Custom { minutes }) = d.offset {
        seconds -= i64::from(minutes) * 60;
    }
    Ok(seconds * 1_000_000 + micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlc_parameters_are_named_parameters() {
        assert_eq!(expand_sqlc("WHERE queue = @queue::text AND x @> '{}'"), "WHERE queue = :queue::text AND x @> '{}'");
        assert_eq!(
            expand_sqlc("coalesce(sqlc.narg('now')::timestamptz, now()) LIMIT sqlc.arg(max)"),
            "coalesce(:now::timestamptz, now()) LIMIT :max"
        );
        assert_eq!(expand_sqlc("SELECT sqlc.embed(river_job), x"), "SELECT river_job.*, x");
        // Quoted text, comments and PostgreSQL's own operators stay.
        for kept in ["'@queue'", "-- @queue\n", "/* @x sqlc.arg(y) */", "a <@ b", "a @@ b", "\"@q\"", "e@x"] {
            assert_eq!(expand_sqlc(kept), kept);
        }
    }

    #[test]
    fn river_templates_are_replaced_everywhere() {
        let schema: BTreeMap<String, String> = [("schema".to_string(), String::new())].into();
        assert_eq!(
            expand_templates(
                "FROM /* TEMPLATE: schema */river_job, nextval('/* TEMPLATE: schema */s')",
                &schema,
                Place::Statement
            ),
            Ok("FROM river_job, nextval('s')".to_string())
        );
        assert_eq!(
            expand_templates("/* TEMPLATE: x */a /* TEMPLATE: x */", &schema, Place::Schema),
            Err(vec!["x".to_string()])
        );
        assert_eq!(
            expand_templates("/* a comment */", &BTreeMap::new(), Place::Statement),
            Ok("/* a comment */".to_string())
        );
    }

    #[test]
    fn code_placeholders_are_replaced_where_given_and_left_elsewhere() {
        let given: BTreeMap<String, String> = [
            ("escapedWorkerSchema".to_string(), "graphile_worker".to_string()),
            ("GRAPHILE_WORKER_SCHEMA".to_string(), "graphile_worker".to_string()),
            ("queueClause".to_string(), "and q in (select id from ${escapedWorkerSchema}.q)".to_string()),
        ]
        .into();
        assert_eq!(
            expand_templates(
                "from ${escapedWorkerSchema}._private_jobs where x ${queueClause}",
                &given,
                Place::Statement
            ),
            Ok("from graphile_worker._private_jobs where x and q in (select id from graphile_worker.q)".to_string())
        );
        assert_eq!(
            expand_templates(
                "create table :GRAPHILE_WORKER_SCHEMA.jobs (a int); select :id, $1::text, 'a:b'",
                &given,
                Place::Schema
            ),
            Ok("create table graphile_worker.jobs (a int); select :id, $1::text, 'a:b'".to_string())
        );
        // In a statement `:NAME` is a parameter, whatever [templates] says.
        assert_eq!(
            expand_templates("select :GRAPHILE_WORKER_SCHEMA", &given, Place::Statement),
            Ok("select :GRAPHILE_WORKER_SCHEMA".to_string())
        );
        // Not given, or not a placeholder: left as written.
        assert_eq!(
            expand_templates("array[(1)]:::GRAPHILE_WORKER_SCHEMA.job_spec[]", &given, Place::Schema),
            Ok("array[(1)]::graphile_worker.job_spec[]".to_string()),
            "a cast to a type of the schema, as Graphile's migrator replaces it"
        );
        for text in ["${other}", "x::GRAPHILE_WORKER_SCHEMA", "$${x}", "${a b}", "$1", ":", "$"] {
            assert_eq!(expand_templates(text, &given, Place::Schema), Ok(text.to_string()), "{text}");
        }
        let looping: BTreeMap<String, String> = [("a".to_string(), "${a}!".to_string())].into();
        assert!(expand_templates("${a}", &looping, Place::Statement).is_err());
    }

    #[test]
    fn parameter_values_read_as_ours_constants_null_and_lists() {
        let read = |text: &str| given(&toml::from_str::<toml::Table>(&format!("v = {text}")).unwrap()["v"]);
        assert_eq!(read("\":batch\""), Ok(Given::Ours("batch".into())));
        assert_eq!(read("\":null\""), Ok(Given::Constant(V::Null)));
        assert_eq!(read("\"::x\""), Ok(Given::Constant(V::Text(":x".into()))));
        assert_eq!(read("2.5"), Ok(Given::Constant(V::Float(2.5))));
        assert_eq!(
            read("[\":max_attempts\", 1000]"),
            Ok(Given::List(vec![Given::Ours("max_attempts".into()), Given::Constant(V::Int(1000))]))
        );
        assert!(read("[[1]]").is_err());
        assert!(read("{ a = 1 }").is_err());
        let list = read("[\":max_attempts\", 1000]").unwrap();
        assert_eq!(list.ours(), vec!["max_attempts"]);
        let ours = |name: &str| (name == "max_attempts").then_some(V::Int(3));
        assert_eq!(list.value(&ours), Some(V::List(vec![V::Int(3), V::Int(1000)])));
        assert_eq!(Given::Ours("batch".into()).value(&ours), None);
    }

    #[test]
    fn a_json_parameter_is_built_around_the_runs_values() {
        let read = |text: &str| given(&toml::from_str::<toml::Table>(&format!("v = {text}")).unwrap()["v"]);
        let doc =
            read(r#"{ json = [{ jobId = ":id", message = "it's \"failed\"", n = 2, x = ":null", y = "::id" }] }"#)
                .unwrap();
        assert_eq!(doc.ours(), vec!["id"]);
        let ours = |name: &str| (name == "id").then_some(V::Int(7));
        let Some(V::Text(text)) = doc.value(&ours) else { panic!("a JSON parameter is text") };
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!([{"jobId": 7, "message": "it's \"failed\"", "n": 2, "x": null, "y": ":id"}])
        );
        let text_id = |name: &str| (name == "id").then(|| V::Text("a\"b".into()));
        let Some(V::Text(text)) = doc.value(&text_id) else { panic!() };
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()[0]["jobId"], "a\"b");
        assert_eq!(doc.value(&|_| None), None);
        assert!(read("{ json = 1, other = 2 }").is_err());
    }

    #[test]
    fn date_times_count_from_2000() {
        let at = |s: &str| micros_since_2000(&s.parse().unwrap()).unwrap();
        assert_eq!(at("2000-01-01T00:00:00Z"), 0);
        assert_eq!(at("2000-01-02T00:00:01Z"), 86_401_000_000);
        assert_eq!(at("2000-01-01T01:00:00+01:00"), 0);
        assert_eq!(at("1999-12-31"), -86_400_000_000);
        // Go's zero time, which River passes for "not set".
        assert_eq!(at("0001-01-01T00:00:00Z"), -63_082_281_600_000_000);
    }
}

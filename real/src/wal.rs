//! PostgreSQL's own history of the run: every committed change to idem's
//! tables, in commit order, read through logical decoding (the
//! `test_decoding` output plugin that ships with PostgreSQL) from a slot
//! made before the engine processes start.
//!
//! It is the store's ground truth, which no engine process can vouch for:
//! a commit whose acknowledgement the proxy dropped is in it; a transaction
//! rolled back is not; two transactions appear in the order PostgreSQL
//! committed them. [`super::history`] turns it into the trace's store
//! events.
//!
//! The slot is read with `pg_logical_slot_get_changes` (which consumes
//! what it returns). A server crashed with `pg_ctl stop -m immediate`
//! recovers the slot from its last checkpoint and may hand a transaction
//! out again; transactions are recognised by their commit's position in
//! the log and kept once.

use std::collections::BTreeMap;

use sqlx::{Connection, PgConnection, Row};

/// The output plugin: part of every PostgreSQL installation.
const PLUGIN: &str = "test_decoding";
/// Rows of decoded changes read per poll, at most.
pub const CHANGES_PER_POLL_MAX: i32 = 10_000;

/// A column's value as `test_decoding` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datum {
    Null,
    /// The text form (quotes removed, `''` unescaped).
    Text(String),
    /// A large value the change did not touch, which the plugin leaves out.
    Unchanged,
}

impl Datum {
    pub fn text(&self) -> Option<&str> {
        match self {
            Datum::Text(text) => Some(text),
            Datum::Null | Datum::Unchanged => None,
        }
    }
}

/// What a change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

/// One row changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// `schema.table`.
    pub table: String,
    pub action: ChangeKind,
    pub columns: BTreeMap<String, Datum>,
}

impl Change {
    pub fn column(&self, name: &str) -> Option<&str> {
        self.columns.get(name).and_then(Datum::text)
    }
}

/// One committed transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The commit record's position in the log.
    pub lsn: u64,
    /// The commit's timestamp: realtime microseconds since the epoch.
    pub t_us: i64,
    pub changes: Vec<Change>,
}

/// One line of the plugin's output.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Line {
    Begin,
    Commit {
        t_us: Option<i64>,
    },
    Change(Change),
    /// A change of a kind the history does not need (`TRUNCATE`, a message).
    Other,
}

/// `0/15261A8` as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

/// `2026-12-03 21:55:15.389999+00` as realtime microseconds.
fn parse_commit_time(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z")
        .ok()
        .map(|t| t.timestamp_micros())
}

fn parse_line(line: &str) -> Result<Line, String> {
    if line == "BEGIN" || line.starts_with("BEGIN ") {
        return Ok(Line::Begin);
    }
    if line == "COMMIT" || line.starts_with("COMMIT ") {
        let t_us = line
            .split_once("(at ")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .and_then(parse_commit_time);
        return Ok(Line::Commit { t_us });
    }
    let Some(rest) = line.strip_prefix("table ") else {
        return Ok(Line::Other);
    };
    let (table, rest) = rest
        .split_once(": ")
        .ok_or_else(|| format!("no table name in {line:?}"))?;
    let (action, rest) = rest.split_once(':').unwrap_or((rest, ""));
    let action = match action {
        "INSERT" => ChangeKind::Insert,
        "UPDATE" => ChangeKind::Update,
        "DELETE" => ChangeKind::Delete,
        _ => return Ok(Line::Other),
    };
    Ok(Line::Change(Change {
        table: table.to_owned(),
        action,
        columns: parse_columns(rest.trim_start())?,
    }))
}

/// `id[uuid]:'...' n[bigint]:5 s[text]:null ...`. An update that changed
/// a row's key prints `old-key: ... new-tuple: ...`; the new tuple is kept.
fn parse_columns(text: &str) -> Result<BTreeMap<String, Datum>, String> {
    let text = text
        .split_once("new-tuple: ")
        .map_or(text, |(_, new)| new)
        .trim();
    let mut columns = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let open = rest
            .find('[')
            .ok_or_else(|| format!("no column type in {rest:?}"))?;
        let name = rest[..open].trim().trim_matches('"').to_owned();
        let after_name = &rest[open + 1..];
        let close = after_name
            .find("]:")
            .ok_or_else(|| format!("unterminated column type in {rest:?}"))?;
        let (datum, remainder) = parse_datum(&after_name[close + 2..])?;
        columns.insert(name, datum);
        rest = remainder.trim_start();
    }
    Ok(columns)
}

/// One value, and the text after it.
fn parse_datum(text: &str) -> Result<(Datum, &str), String> {
    if let Some(quoted) = text.strip_prefix('\'') {
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            if c != '\'' {
                value.push(c);
                continue;
            }
            if quoted[i + 1..].starts_with('\'') {
                value.push('\'');
                chars.next();
                continue;
            }
            return Ok((Datum::Text(value), &quoted[i + 1..]));
        }
        return Err(format!("unterminated quoted value in {text:?}"));
    }
    let end = text.find(' ').unwrap_or(text.len());
    let (token, rest) = text.split_at(end);
    let datum = match token {
        "null" => Datum::Null,
        "unchanged-toast-datum" => Datum::Unchanged,
        _ => Datum::Text(token.to_owned()),
    };
    Ok((datum, rest))
}

/// A decoding slot and what has been read from it.
#[derive(Debug)]
pub struct WalReader {
    url: String,
    slot: String,
    connection: Option<PgConnection>,
    /// The open transaction's changes, between its BEGIN and its COMMIT.
    open: Vec<Change>,
    /// The last commit kept: anything at or before it is a repeat.
    last_commit_lsn: u64,
    /// The slot lives as long as the connection that made it.
    temporary: bool,
}

impl WalReader {
    /// Makes the slot `slot` on the database at `url` and starts reading
    /// from there. A slot that is not `temporary` outlives a crash of the
    /// server (for a throwaway cluster, which takes the slot with it); a
    /// temporary one goes with the connection that made it, so that a run
    /// killed midway leaves no slot holding another server's log.
    pub async fn create(url: &str, slot: &str, temporary: bool) -> Result<Self, String> {
        let mut connection = PgConnection::connect(url)
            .await
            .map_err(|e| format!("cannot connect to read the store's history: {e}"))?;
        sqlx::query("select pg_create_logical_replication_slot($1, $2, $3)")
            .bind(slot)
            .bind(PLUGIN)
            .bind(temporary)
            .execute(&mut connection)
            .await
            .map_err(|e| {
                format!(
                    "real mode reads the store's history by logical decoding, which this server \
                     refuses ({e}); it needs wal_level = logical and a free replication slot"
                )
            })?;
        Ok(Self {
            url: url.to_owned(),
            slot: slot.to_owned(),
            connection: Some(connection),
            open: Vec::new(),
            last_commit_lsn: 0,
            temporary,
        })
    }

    /// The transactions committed since the last poll, in commit order. An
    /// error (the server is down) leaves the reader ready to try again.
    pub async fn poll(&mut self) -> Result<Vec<Commit>, String> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None if self.temporary => {
                return Err("the store's history went with its connection".to_owned());
            }
            None => self.connection.insert(
                PgConnection::connect(&self.url)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
        };
        let rows = sqlx::query(
            "select lsn::text as lsn, data from pg_logical_slot_get_changes($1, null, $2, \
             'include-timestamp', '1', 'skip-empty-xacts', '1', 'include-xids', '0')",
        )
        .bind(&self.slot)
        .bind(CHANGES_PER_POLL_MAX)
        .fetch_all(&mut *connection)
        .await;
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => {
                // A broken connection is dropped; the next poll reconnects.
                self.connection = None;
                self.open.clear();
                return Err(e.to_string());
            }
        };
        let mut commits = Vec::new();
        for row in rows {
            let lsn: String = row.try_get("lsn").map_err(|e| e.to_string())?;
            let data: String = row.try_get("data").map_err(|e| e.to_string())?;
            let lsn = parse_lsn(&lsn).ok_or_else(|| format!("a log position {lsn:?}"))?;
            if let Some(commit) = self.take_line(lsn, &data)? {
                commits.push(commit);
            }
        }
        Ok(commits)
    }

    fn take_line(&mut self, lsn: u64, data: &str) -> Result<Option<Commit>, String> {
        match parse_line(data)? {
            Line::Begin => self.open.clear(),
            Line::Change(change) => self.open.push(change),
            Line::Other => {}
            Line::Commit { t_us } => {
                let changes = std::mem::take(&mut self.open);
                if lsn <= self.last_commit_lsn {
                    return Ok(None);
                }
                self.last_commit_lsn = lsn;
                let t_us = t_us.ok_or_else(|| format!("a commit without its time: {data:?}"))?;
                return Ok(Some(Commit { lsn, t_us, changes }));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> Datum {
        Datum::Text(value.to_owned())
    }

    #[test]
    fn a_change_line_parses_with_its_quoted_arrays_and_nulls() {
        let line = "table idem.t: INSERT: id[uuid]:'00000000-0000-0000-0000-000000000001' \
                    j[jsonb]:'{\"a\": [1, \"x''y\"]}' a[text[]]:'{a,b}' \
                    at[timestamp with time zone]:'2026-01-01 00:00:00+00' s[text]:null n[bigint]:5 \
                    big[jsonb]:unchanged-toast-datum";
        let Ok(Line::Change(change)) = parse_line(line) else {
            panic!("a change");
        };
        assert_eq!(change.table, "idem.t");
        assert_eq!(change.action, ChangeKind::Insert);
        let expected: BTreeMap<String, Datum> = [
            ("id", text("00000000-0000-0000-0000-000000000001")),
            ("j", text("{\"a\": [1, \"x'y\"]}")),
            ("a", text("{a,b}")),
            ("at", text("2026-01-01 00:00:00+00")),
            ("s", Datum::Null),
            ("n", text("5")),
            ("big", Datum::Unchanged),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(change.columns, expected);
    }

    #[test]
    fn commits_carry_their_time_and_repeats_are_dropped() {
        assert_eq!(
            parse_line("COMMIT (at 2026-12-03 21:55:15.389999+00)"),
            Ok(Line::Commit {
                t_us: Some(1_796_334_915_389_999)
            })
        );
        assert_eq!(
            parse_line("COMMIT 12 (at 2026-12-03 22:55:15.5+01)"),
            Ok(Line::Commit {
                t_us: Some(1_796_334_915_500_000)
            })
        );
        assert_eq!(parse_lsn("0/15261A8"), Some(0x0152_61A8));
        assert_eq!(parse_lsn("1/0"), Some(1 << 32));
        let mut reader = WalReader {
            url: String::new(),
            slot: String::new(),
            connection: None,
            open: Vec::new(),
            last_commit_lsn: 0,
            temporary: false,
        };
        let commit = "COMMIT (at 2026-12-03 21:55:15+00)";
        let change = "table idem.jobs: DELETE: id[uuid]:'x'";
        assert_eq!(reader.take_line(10, "BEGIN"), Ok(None));
        assert_eq!(reader.take_line(10, change), Ok(None));
        let first = reader.take_line(20, commit).expect("parses");
        assert_eq!(first.map(|c| (c.lsn, c.changes.len())), Some((20, 1)));
        // Handed out again after a crash: kept once.
        assert_eq!(reader.take_line(10, "BEGIN"), Ok(None));
        assert_eq!(reader.take_line(10, change), Ok(None));
        assert_eq!(reader.take_line(20, commit), Ok(None));
        assert!(reader.take_line(30, commit).expect("parses").is_some());
    }

    #[test]
    fn malformed_lines_are_errors_not_guesses() {
        assert!(parse_line("table idem.t: INSERT: id[uuid]:'unterminated").is_err());
        assert!(parse_line("table idem.t: INSERT: id").is_err());
        assert_eq!(
            parse_line("table idem.t: TRUNCATE: (no-flags)"),
            Ok(Line::Other)
        );
    }
}

//! The `idem-server` binary as an operator runs it (issue 22): a
//! certification that says whether it recorded anything and where,
//! `certificates list|show|revoke` against PostgreSQL, and `serve
//! --certify` with JSON logs: serving at once, certifying in the
//! background, every log line JSON.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use idem_core::clock::{Clock, SystemClock};
use idem_core::provider::server::{Behaviour, ProviderServer};
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BINARY: &str = env!("CARGO_BIN_EXE_idem-server");

/// A compliant provider answering after `latency_ms`, served from a
/// runtime of its own (the binary runs in another process), and the
/// runtime that keeps it alive.
fn compliant_provider(
    latency_ms: u64,
) -> Result<(tokio::runtime::Runtime, SocketAddr), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = ProviderServer::new(Behaviour {
            latency_ms,
            ..Behaviour::default()
        });
        tokio::spawn(idem_core::provider::server::serve(listener, server));
        Ok::<_, Box<dyn std::error::Error>>(addr)
    })?;
    Ok((runtime, addr))
}

fn run(args: &[&str]) -> Result<Output, std::io::Error> {
    Command::new(BINARY)
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Issue 22, items 6 and 10: `certify` without a database says it recorded
/// nothing and names the endpoint; with one it records, and `certificates
/// list|show|revoke` manage what it recorded without psql.
#[test]
fn an_operator_manages_certificates_from_the_command_line() -> TestResult {
    let (provider_runtime, addr) = compliant_provider(0)?;
    let provider = format!("p=http://{addr}");
    let certify = ["certify", "--provider", &provider, "--model", "m"];
    let unrecorded = run(&certify)?;
    let said = stdout(&unrecorded);
    assert_eq!(unrecorded.status.code(), Some(0), "{said}");
    assert!(said.contains("not recorded: no --database-url"), "{said}");
    assert!(said.contains(&format!("endpoint http://{addr}")), "{said}");

    let url = provider_runtime.block_on(idem_core::testing::pg::cluster().fresh_database_url());
    let database = ["--database-url", url.as_str()];
    let recorded = run(&[&certify[..], &database[..]].concat())?;
    assert_eq!(recorded.status.code(), Some(0), "{}", stdout(&recorded));

    let certificates = |tail: &[&str]| run(&[&["certificates"][..], &database[..], tail].concat());
    let listed = certificates(&["list"])?;
    let listed_text = stdout(&listed);
    assert_eq!(listed.status.code(), Some(0), "{listed_text}");
    assert!(listed_text.contains("p\tm\t"), "{listed_text}");
    assert!(
        listed_text.contains("\ttrue\tcertification\t"),
        "{listed_text}"
    );
    assert!(listed_text.ends_with("1 certificates\n"), "{listed_text}");

    let shown = certificates(&["show", "--provider", "p"])?;
    let shown: Value = serde_json::from_slice(&shown.stdout)?;
    assert_eq!(shown[0]["key"]["model"], "m");
    assert_eq!(shown[0]["passed"], true);
    assert!(shown[0]["evidence"]["checks"].is_object(), "{shown}");

    let revoke = ["revoke", "--provider", "p", "--reason", "a test"];
    let revoked = certificates(&revoke)?;
    assert_eq!(revoked.status.code(), Some(0), "{}", stdout(&revoked));
    assert!(stdout(&revoked).contains("1 certificates revoked"));
    let after: Value =
        serde_json::from_slice(&certificates(&["list", "--format", "json"])?.stdout)?;
    assert_eq!(after[0]["passed"], false, "{after}");
    assert_eq!(after[0]["evidence"]["source"], "revoked", "{after}");
    assert_eq!(after[0]["evidence"]["reason"], "a test", "{after}");
    // Nothing passed is left to revoke: a usage error, not a silent 0.
    let again = certificates(&revoke)?;
    assert_eq!(again.status.code(), Some(2), "{}", stdout(&again));
    Ok(())
}

/// Issue 36, item 3: a certification shows its progress on stderr while
/// stdout stays the verdict's, and with `--format json` a run that could
/// not be made prints a JSON error (it printed nothing, exit 2).
#[test]
fn certify_shows_progress_and_answers_json_on_every_exit() -> TestResult {
    let (_provider_runtime, addr) = compliant_provider(0)?;
    let provider = format!("p=http://{addr}");
    let certified = run(&["certify", "--provider", &provider, "--format", "json"])?;
    assert_eq!(certified.status.code(), Some(0), "{}", stderr(&certified));
    let verdict: Value = serde_json::from_slice(&certified.stdout)?;
    assert_eq!(verdict["evidence"]["passed"], true, "{verdict}");
    let progress = stderr(&certified);
    assert!(
        progress.contains(&format!("certifying p at http://{addr}: 69 calls")),
        "{progress}"
    );
    assert!(
        progress.contains("69/69 calls done, 0 without a usable answer"),
        "{progress}"
    );

    let closed = format!("p=http://127.0.0.1:{}", free_port()?);
    let failed = run(&["certify", "--provider", &closed, "--format", "json"])?;
    assert_eq!(failed.status.code(), Some(2), "{}", stderr(&failed));
    let error: Value = serde_json::from_slice(&failed.stdout)?;
    assert_eq!(error["exit_code"], 2, "{error}");
    let said = error["error"].as_str().unwrap_or_default();
    assert!(said.contains("cannot be reached"), "{error}");
    Ok(())
}

/// What a command wrote to stderr.
fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Issue 36, item 4: `certificates` reads a schema that exists; a
/// mistyped --database-schema is refused, and neither created nor
/// migrated (read commands never write); a revocation must say why.
#[test]
fn certificates_commands_never_create_a_schema_and_revocations_say_why() -> TestResult {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = runtime.block_on(idem_core::testing::pg::cluster().fresh_database_url());
    let migrated = run(&["migrate", "--database-url", &url])?;
    assert_eq!(migrated.status.code(), Some(0), "{}", stderr(&migrated));
    let schemas = || -> Result<Vec<String>, Box<dyn std::error::Error>> {
        Ok(runtime.block_on(async {
            let pool = sqlx::PgPool::connect(&url).await?;
            sqlx::query_scalar(
                "select nspname::text from pg_namespace where nspname like 'id%' order by 1",
            )
            .fetch_all(&pool)
            .await
        })?)
    };
    assert_eq!(schemas()?, vec!["idem".to_owned()]);
    for command in [
        &["list"][..],
        &["show", "--provider", "p"],
        &["revoke", "--provider", "p", "--reason", "a test"],
    ] {
        let args = [
            &[
                "certificates",
                "--database-url",
                &url,
                "--database-schema",
                "idme",
            ][..],
            command,
        ]
        .concat();
        let refused = run(&args)?;
        let said = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{command:?}: {said}");
        assert!(
            said.contains("\"idme\" holds no idem tables"),
            "{command:?}: {said}"
        );
    }
    assert_eq!(schemas()?, vec!["idem".to_owned()], "no schema was created");
    let listed = run(&["certificates", "--database-url", &url, "list"])?;
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    for blank in ["", "  "] {
        let args = [
            "certificates",
            "--database-url",
            &url,
            "revoke",
            "--provider",
            "p",
            "--reason",
            blank,
        ];
        let refused = run(&args)?;
        let said = stderr(&refused);
        assert_eq!(refused.status.code(), Some(2), "{blank:?}: {said}");
        assert!(said.contains("say why"), "{blank:?}: {said}");
    }
    Ok(())
}

/// A port nothing listens on now.
fn free_port() -> Result<u16, std::io::Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Issue 22, items 2 and 7: `serve --certify` answers `/healthz` while it
/// certifies in the background, logs the start and the pass, and with
/// `--log-format json` every line it writes is JSON (no text table).
#[test]
fn serve_certifies_in_the_background_and_logs_only_json() -> TestResult {
    // Slow enough that the certification takes seconds, not milliseconds.
    let (provider_runtime, addr) = compliant_provider(100)?;
    let listen = format!("127.0.0.1:{}", free_port()?);
    let provider = format!("p=http://{addr}");
    let mut child = Command::new(BINARY)
        .args(["serve", "--store", "memory", "--listen", &listen])
        .args([
            "--token",
            "t=alice",
            "--provider",
            &provider,
            "--certify",
            "p",
        ])
        .args(["--log-format", "json"])
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("stderr")?;
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = SystemClock.monotonic();
    let mut healthy_at = None;
    let mut lines: Vec<String> = Vec::new();
    while SystemClock.monotonic().saturating_sub(started) < Duration::from_secs(60) {
        let listening = std::net::TcpStream::connect(&listen).is_ok();
        if listening && healthy_at.is_none() {
            let health = provider_runtime.block_on(async {
                let addr: SocketAddr = listen.parse().expect("an address");
                crate::support::send(addr, "GET", "/healthz", &[], None).await
            });
            if health.status == 200 {
                lines.extend(lines_rx.try_iter());
                healthy_at = Some(lines.len());
            }
        }
        lines.extend(lines_rx.try_iter());
        if lines
            .iter()
            .any(|l| l.contains("certified: failover to it is allowed"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output()?;
    lines.extend(lines_rx.try_iter());
    let healthy_at = healthy_at.ok_or("never healthy")?;
    let text = lines.join("\n");
    let position = |what: &str| lines.iter().position(|l| l.contains(what));
    let certifying = position("certifying in the background").ok_or_else(|| text.clone())?;
    let passed = position("certified: failover to it is allowed").ok_or_else(|| text.clone())?;
    assert!(certifying < passed, "{text}");
    // Healthy before the certification had passed: it serves at once.
    assert!(healthy_at <= passed, "{text}");
    for line in &lines {
        let parsed: Result<Value, _> = serde_json::from_str(line);
        assert!(parsed.is_ok(), "not JSON: {line}");
    }
    assert!(
        output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    Ok(())
}

/// Issue 22, item 1: a model name with a space, asserted certified, starts
/// a server that answers (it panicked at start), and one that is empty is
/// a usage error (exit 2), not a verdict.
#[test]
fn serve_takes_any_model_name_and_refuses_an_empty_one() -> TestResult {
    let listen = format!("127.0.0.1:{}", free_port()?);
    let serve = |model: &str| {
        Command::new(BINARY)
            .args(["serve", "--store", "memory", "--listen", &listen])
            .args(["--token", "t=alice", "--provider", "p=http://127.0.0.1:9"])
            .args(["--model", model, "--certified", "p"])
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    };
    let empty = serve("p=")?.wait_with_output()?;
    assert_eq!(
        empty.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let mut child = serve("p=my model?x")?;
    let started = SystemClock.monotonic();
    let mut listening = false;
    while !listening && SystemClock.monotonic().saturating_sub(started) < Duration::from_secs(20) {
        if let Some(status) = child.try_wait()? {
            let output = child.wait_with_output()?;
            return Err(format!(
                "exited {status}: {}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        listening = std::net::TcpStream::connect(&listen).is_ok();
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "never listened");
    Ok(())
}

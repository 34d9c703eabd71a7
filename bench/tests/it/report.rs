//! `idem report` and `idem run --report` end to end, and their pages in a
//! real browser: headless Chromium loads each page from its file, runs its
//! script, and the test reads the DOM after scripts ran and the console.
//! The browser is `IDEM_CHROMIUM` if set, else Debian's `chromium` (which
//! `.ci/run` installs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where Chromium is when `IDEM_CHROMIUM` does not say.
const CHROMIUM_DEFAULT: &str = "/usr/bin/chromium";

/// The Chromium (or Chrome) binary the pages are checked in.
fn chromium_path() -> PathBuf {
    std::env::var_os("IDEM_CHROMIUM")
        .filter(|path| !path.is_empty())
        .map_or_else(|| PathBuf::from(CHROMIUM_DEFAULT), PathBuf::from)
}

fn idem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(args)
        .output()
        .expect("the idem binary runs")
}

/// What Chromium made of a page: the DOM after its scripts ran, and what
/// the page wrote to the console.
struct Rendered {
    dom: String,
    console: Vec<String>,
}

fn chromium(page: &Path) -> Rendered {
    let browser = chromium_path();
    assert!(
        browser.exists(),
        "{} is missing: these tests check the reports in a real browser; install it with `apt-get install -y chromium` (.ci/run does), or point IDEM_CHROMIUM at a Chromium or Chrome binary",
        browser.display()
    );
    let profile = tempfile::tempdir().expect("a temporary profile directory");
    let output = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium failed on {}",
        page.display()
    );
    let console = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| l.contains("CONSOLE"))
        .map(str::to_owned)
        .collect();
    Rendered {
        dom: String::from_utf8_lossy(&output.stdout).into_owned(),
        console,
    }
}

fn assert_clean(rendered: &Rendered, what: &str) {
    assert!(
        rendered.console.is_empty(),
        "{what}: the console is not clean: {:#?}",
        rendered.console
    );
    assert!(
        rendered.dom.len() > 10_000 && rendered.dom.contains("<h1>"),
        "{what}: the page is blank"
    );
    // The script ran: it draws the time axis and fills the zoom label.
    assert!(
        rendered.dom.contains(r#"class="tick""#)
            || !rendered.dom.contains("svg class=\"timeline\""),
        "{what}: the timeline's script did not run"
    );
}

fn report_dir() -> PathBuf {
    let dir = tempfile::tempdir().expect("a temporary directory").keep();
    let out = idem(&[
        "report",
        "--out",
        dir.to_str().expect("a UTF-8 path"),
        "--seeds",
        "0..2",
        "--scenarios",
        "timeout-unknown,out-of-order-completion",
        // The naive designs these two scenarios catch.
        "--designs",
        "timeout-is-failure,last-writer-wins",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

#[test]
fn report_pages_render_in_chromium() -> Result<(), Box<dyn std::error::Error>> {
    let dir = report_dir();
    let suite: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("suite.json"))?)?;
    assert_eq!(suite["schema"], idem_reports::SCHEMA_VERSION);
    assert_eq!(suite["verdict"], "pass");

    let index = chromium(&dir.join("index.html"));
    assert_clean(&index, "index.html");
    assert!(index.dom.contains("last-writer-wins"));
    assert_eq!(index.dom.matches("<figure>").count(), 4, "four plots");

    // The timeout-unknown page from the report: one lane per host, an
    // unknown bar, and the refused backup press on it.
    let page = suite["pages"]
        .as_array()
        .and_then(|pages| {
            pages
                .iter()
                .find(|p| p["scenario"] == "timeout-unknown" && p["design"] == "correct")
        })
        .and_then(|p| p["file"].as_str())
        .ok_or("no page for timeout-unknown under the correct design")?;
    let run = chromium(&dir.join(page));
    assert_clean(&run, page);
    let hosts = [
        "client-alice",
        "api-1",
        "api-2",
        "worker-1",
        "reconciler",
        "store",
        "provider-primary",
        "provider-fallback",
    ];
    assert_eq!(
        run.dom.matches(r#"class="lane-label""#).count(),
        hosts.len()
    );
    for host in hosts {
        assert!(
            run.dom.contains(&format!(r#"data-host="{host}""#)),
            "no lane for {host}"
        );
    }
    assert!(run.dom.contains("attempt state-unknown"), "no unknown bar");
    assert!(
        run.dom.contains(r#"class="refused"#),
        "no refused backup press"
    );

    // A failing run's page carries its likelihood band (`--explain-samples`
    // by default): the world of out-of-order-completion forces
    // last-writer-wins's failure, and the page names what it turns on.
    let failing = suite["pages"]
        .as_array()
        .and_then(|pages| {
            pages.iter().find(|p| {
                p["scenario"] == "out-of-order-completion" && p["design"] == "last-writer-wins"
            })
        })
        .and_then(|p| p["file"].as_str())
        .ok_or("no page for out-of-order-completion under last-writer-wins")?;
    let run = chromium(&dir.join(failing));
    assert_clean(&run, failing);
    let why = run
        .dom
        .find(r#"<h2 id="why">Why it failed</h2>"#)
        .ok_or("the likelihood section")?;
    let section = &run.dom[why..];
    assert!(section.contains("<svg"), "the band is drawn");
    assert!(
        section.contains("No draw decides it") && section.contains("the late completion of"),
        "the forced failure is named"
    );
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

#[test]
fn run_report_names_the_neighbour_of_a_failing_run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("f.html");
    let out = idem(&[
        "run",
        "out-of-order-completion",
        "--seed",
        "0",
        "--design",
        "last-writer-wins",
        "--report",
        file.to_str().ok_or("a UTF-8 path")?,
    ]);
    assert_eq!(out.status.code(), Some(1), "the mutant fails this seed");
    let html = std::fs::read_to_string(&file)?;
    assert!(
        html.contains("result overwritten"),
        "the overwrite is shown"
    );
    assert!(
        html.contains("Diff against passing seed") || html.contains("under the correct design"),
        "the neighbour is named"
    );
    assert!(html.contains(r#"id="first-divergence""#));
    assert!(!html.contains("http://") && !html.contains("https://"));
    let rendered = chromium(&file);
    assert_clean(&rendered, "the run page");
    Ok(())
}

#[test]
fn the_same_suite_gives_the_same_bytes_apart_from_provenance()
-> Result<(), Box<dyn std::error::Error>> {
    let (one, two) = (tempfile::tempdir()?, tempfile::tempdir()?);
    for (dir, jobs) in [(&one, "1"), (&two, "2")] {
        let out = idem(&[
            "report",
            "--out",
            dir.path().to_str().ok_or("a UTF-8 path")?,
            "--seeds",
            "0..3",
            "--scenarios",
            "double-click",
            "--designs",
            "check-then-insert",
            "--jobs",
            jobs,
        ]);
        assert_eq!(out.status.code(), Some(0));
    }
    let mut files = vec![
        "index.html".to_owned(),
        "summary.md".to_owned(),
        "junit.xml".to_owned(),
        "suite.json".to_owned(),
    ];
    for entry in std::fs::read_dir(one.path().join("runs"))? {
        files.push(format!("runs/{}", entry?.file_name().to_string_lossy()));
    }
    assert!(files.len() > 4, "run pages were written");
    for file in files {
        let a = std::fs::read_to_string(one.path().join(&file))?;
        let b = std::fs::read_to_string(two.path().join(&file))?;
        assert_ne!(a.len(), 0);
        assert_eq!(
            idem_reports::html::without_provenance(&a),
            idem_reports::html::without_provenance(&b),
            "{file} differs outside its provenance block"
        );
    }
    Ok(())
}

/// idem-reports does not link the simulator, so its timeline names fault
/// kinds by their trace names; each must be a kind of the simulator's
/// vocabulary.
#[test]
fn the_timeline_names_only_fault_kinds_the_simulator_has() {
    use idem_reports::timeline::fault_kinds;
    use idem_sim::scenario::FaultKind;
    let named = std::iter::once(fault_kinds::CRASH)
        .chain(fault_kinds::CLOCK)
        .chain(fault_kinds::COLOURS.iter().map(|(name, _)| *name));
    for name in named {
        assert!(
            FaultKind::from_name(name).is_some(),
            "the timeline names {name:?}, which is no fault kind"
        );
    }
}

/// `idem explain --report`: the failing run's page carries the
/// likelihood band under the timeline, with the decisive decision marked,
/// and renders cleanly in Chromium.
#[test]
fn an_explained_run_page_shows_its_likelihood_band() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("explained.html");
    let out = idem(&[
        "explain",
        "double-click",
        "--seed",
        "1",
        "--design",
        "check-then-insert",
        "--samples",
        "30",
        "--report",
        file.to_str().ok_or("a UTF-8 path")?,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = chromium(&file);
    assert_clean(&rendered, "explained run page");
    let dom = &rendered.dom;
    let timeline = dom.find("<h2>Timeline</h2>").ok_or("a timeline")?;
    let why = dom
        .find(r#"<h2 id="why">Why it failed</h2>"#)
        .ok_or("the likelihood section")?;
    assert!(timeline < why, "the band comes under the timeline");
    assert!(
        dom[timeline..why].contains(r#"class="decisive""#)
            && dom[timeline..why].contains("decisive: "),
        "the decisive decision is drawn across the timeline, named"
    );
    let section = &dom[why..];
    assert!(section.contains("<svg"), "the band is drawn");
    assert!(
        section.contains("Decisive at "),
        "the decisive decision is named"
    );
    assert!(section.contains("decisive, "), "and marked on the band");
    Ok(())
}

/// `idem report --explain-seeds`: the index tells what each naive design
/// is fragile to, in a table a browser renders.
#[test]
fn the_index_tells_what_each_naive_design_is_fragile_to() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let out = idem(&[
        "report",
        "--out",
        dir.path().to_str().ok_or("a UTF-8 path")?,
        "--seeds",
        "0..1",
        "--scenarios",
        "double-click",
        "--designs",
        "check-then-insert",
        "--explain-seeds",
        "0..24",
    ]);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = chromium(&dir.path().join("index.html"));
    let dom = &rendered.dom;
    let section = dom
        .find("What each naive design is fragile to")
        .ok_or("the fragility section")?;
    let table = &dom[section..];
    assert!(
        table.contains("<code>check-then-insert</code>: "),
        "one heading per naive design"
    );
    // Its race needs two creates of one key at once: a double click is
    // among its triggers over these worlds (measured in the explain tests).
    let trigger = table.find(">trigger<").ok_or("a trigger row")?;
    assert!(
        table[trigger..].contains("double click"),
        "a double click triggers it"
    );
    Ok(())
}

/// `idem real --report`: a real run's page (real processes, a real
/// PostgreSQL, the wall clock) renders cleanly in Chromium, says it is
/// real, and draws the real run's attempt on its timeline.
#[test]
fn a_real_run_page_renders_in_chromium() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("real.html");
    let out = idem(&[
        "real",
        "double-click",
        "--seed",
        "1",
        "--report",
        file.to_str().ok_or("a UTF-8 path")?,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = chromium(&file);
    assert_clean(&rendered, "real run page");
    let dom = &rendered.dom;
    assert!(
        dom.contains("Real mode: idem processes against a real PostgreSQL"),
        "it says it is real"
    );
    assert!(dom.contains("attempt 1"), "the attempt is drawn");
    assert!(
        dom.contains("idem real double-click --seed 1"),
        "the repro command is real mode's"
    );
    assert!(
        dom.contains("ms of the run (wall clock)"),
        "its time is the wall clock's"
    );
    assert!(!dom.contains("simulated ms"), "not the simulator's");
    Ok(())
}

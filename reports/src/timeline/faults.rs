//! The fault plan on the timeline: windows shaded on the lanes a fault
//! touches (until it heals, or to the end of the history), a host down
//! from its crash to its restart, and the marks of faults that are an
//! instant (a crash, a restart, a clock stepped, a store rule armed).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::{FaultWindow, Lanes, Mark};
use crate::trace::{Body, RunEvent, RunTrace};

/// What a fault plan event does to the drawing.
enum Effect<'a> {
    /// The host goes down until it restarts.
    Crash(&'a str),
    /// The host comes back, with nothing in memory.
    Restart(&'a str),
    /// The host's clock stepped and stays (a jump, or an offset or drift
    /// with no duration): nothing opens or heals.
    ClockStep(&'a str),
    /// The fault of this kind with the same detail heals.
    Heal(&'a str),
    /// A window opens (the fault has a duration).
    Open,
    /// A rule armed in the store's fault plan; it fires later as a
    /// store_fault_injected event.
    Armed,
}

fn effect<'a>(name: &'a str, detail: &'a Value) -> Effect<'a> {
    let host = detail.get("host").and_then(Value::as_str);
    match (name, host) {
        (fault_kinds::CRASH, Some(host)) => Effect::Crash(host),
        ("restart", Some(host)) => Effect::Restart(host),
        (name, Some(host))
            if fault_kinds::CLOCK.contains(&name)
                && detail.get("duration_ms").is_none_or(Value::is_null) =>
        {
            Effect::ClockStep(host)
        }
        _ => match name.strip_prefix("heal_") {
            Some(healed) => Effect::Heal(healed),
            None if detail.get("duration_ms").is_some() => Effect::Open,
            None => Effect::Armed,
        },
    }
}

/// The fold over the trace that shades fault windows: each healed window
/// when it heals, then those still open and the hosts still down.
pub(super) fn fault_windows(trace: &RunTrace, lanes: &mut Lanes, end_ms: u64) -> Vec<FaultWindow> {
    let mut windows = Vec::new();
    let mut open: Vec<(&RunEvent, &str, &Value)> = Vec::new();
    let mut down: BTreeMap<&str, &RunEvent> = BTreeMap::new();
    for event in &trace.events {
        let Body::Fault { name, detail } = &event.body else {
            continue;
        };
        match effect(name, detail) {
            Effect::Crash(host) => {
                down.insert(host, event);
            }
            Effect::Restart(host) => {
                if let Some(crash) = down.remove(host) {
                    windows.push(down_window(lanes, host, crash, Some(event), end_ms));
                }
            }
            Effect::Heal(healed) => {
                if let Some(index) = open
                    .iter()
                    .position(|(_, n, d)| *n == healed && *d == detail)
                {
                    let (fired, _, _) = open.remove(index);
                    windows.push(window(lanes, healed, detail, fired, Some(event), end_ms));
                }
            }
            Effect::Open => open.push((event, name, detail)),
            Effect::ClockStep(_) | Effect::Armed => {}
        }
    }
    // Faults that never healed run to the end of the history.
    for (fired, name, detail) in open {
        windows.push(window(lanes, name, detail, fired, None, end_ms));
    }
    for (host, crash) in down {
        windows.push(down_window(lanes, host, crash, None, end_ms));
    }
    windows
}

/// A fault's window, from `fired` to `healed` (or the end of the history).
fn window(
    lanes: &mut Lanes,
    name: &str,
    detail: &Value,
    fired: &RunEvent,
    healed: Option<&RunEvent>,
    end_ms: u64,
) -> FaultWindow {
    FaultWindow {
        name: name.to_owned(),
        lanes: fault_lanes(lanes, detail),
        t0_ms: fired.t_ms,
        t1_ms: healed.map_or(end_ms, |e| e.t_ms),
        healed: healed.is_some(),
        seqs: std::iter::once(fired.seq)
            .chain(healed.map(|e| e.seq))
            .collect(),
    }
}

/// A host down from its crash to its restart (or the end of the history).
fn down_window(
    lanes: &mut Lanes,
    host: &str,
    crash: &RunEvent,
    restart: Option<&RunEvent>,
    end_ms: u64,
) -> FaultWindow {
    FaultWindow {
        name: "down".to_owned(),
        lanes: vec![lanes.index(host)],
        t0_ms: crash.t_ms,
        t1_ms: restart.map_or(end_ms, |e| e.t_ms),
        healed: restart.is_some(),
        seqs: std::iter::once(crash.seq)
            .chain(restart.map(|e| e.seq))
            .collect(),
    }
}

/// The marks a fault plan event makes: a crash, a restart, a clock that
/// stepped, a rule armed on each lane it names.
pub(super) fn fault_marks(event: &RunEvent, lanes: &mut Lanes) -> Vec<Mark> {
    let Body::Fault { name, detail } = &event.body else {
        return Vec::new();
    };
    let mark = |lane, glyph, colour, title| Mark {
        lane,
        t_ms: event.t_ms,
        glyph,
        colour,
        title,
        seqs: vec![event.seq],
    };
    match effect(name, detail) {
        Effect::Crash(host) => vec![mark(
            lanes.index(host),
            "✖",
            "#b91c1c",
            format!("{host} crashed"),
        )],
        Effect::Restart(host) => vec![mark(
            lanes.index(host),
            "↻",
            "#15803d",
            format!("{host} restarted, with nothing in memory"),
        )],
        Effect::ClockStep(host) => vec![mark(
            lanes.index(host),
            "⏱",
            "#0e7490",
            clock_title(host, name, detail),
        )],
        Effect::Armed => fault_lanes(lanes, detail)
            .into_iter()
            .map(|lane| mark(lane, "⚑", "#9a3412", format!("fault plan: {name} armed")))
            .collect(),
        Effect::Heal(_) | Effect::Open => Vec::new(),
    }
}

/// The lanes a fault's detail names.
fn fault_lanes(lanes: &mut Lanes, detail: &Value) -> Vec<usize> {
    let mut hit = BTreeSet::new();
    for field in ["a", "b", "host"] {
        if let Some(host) = detail.get(field).and_then(Value::as_str) {
            hit.insert(lanes.index(host));
        }
    }
    if let Some(provider) = detail.get("provider").and_then(Value::as_str) {
        hit.insert(lanes.index(&format!("provider-{provider}")));
    }
    if detail.get("op").is_some() {
        hit.insert(lanes.index("store"));
    }
    hit.into_iter().collect()
}

/// What a clock fault that stays did, for a mark's title.
fn clock_title(host: &str, name: &str, detail: &Value) -> String {
    let number = |field: &str| detail.get(field).and_then(Value::as_i64);
    // Each clock kind has a field of its own, so the field tells the kind.
    match (number("jump_ms"), number("offset_ms"), number("drift_ppm")) {
        (Some(ms), _, _) => format!("{host}'s clock jumped {ms:+} ms"),
        (_, Some(ms), _) => format!("{host}'s clock set {ms:+} ms off true time"),
        (_, _, Some(ppm)) => format!("{host}'s clock drifts {ppm:+} ppm"),
        _ => format!("{host}'s clock: {name}"),
    }
}

/// The fault kinds the timeline draws in a way of their own, by the names
/// the trace gives them (the simulator's `FaultKind::name`). idem-reports
/// reads traces and does not link the simulator, so these are names, not
/// the simulator's enum; a test in idem-bench (tests/it/report.rs) holds every name here to
/// that enum, so a renamed or removed kind fails it.
pub mod fault_kinds {
    /// A crash: a mark, and its host down until the restart.
    pub const CRASH: &str = "crash";
    /// Clock faults: a mark when they stay, a window when they heal.
    pub const CLOCK: [&str; 3] = ["clock_jump", "clock_offset", "clock_drift"];
    /// Shading colours of fault windows by kind; other kinds get
    /// [`DEFAULT_COLOUR`].
    pub const COLOURS: &[(&str, &str)] = &[
        ("clock_offset", "#0e7490"),
        ("clock_drift", "#0e7490"),
        ("partition", "#dc2626"),
        ("hold", "#ea580c"),
        ("link_latency", "#ca8a04"),
        ("provider_hang", "#9333ea"),
        ("provider_stall", "#9333ea"),
        ("provider_error", "#db2777"),
    ];
    pub const DEFAULT_COLOUR: &str = "#ef4444";
}

/// The colour of a fault kind's shading.
pub(super) fn fault_colour(name: &str) -> &'static str {
    fault_kinds::COLOURS
        .iter()
        .find(|(kind, _)| *kind == name)
        .map_or(fault_kinds::DEFAULT_COLOUR, |(_, colour)| colour)
}

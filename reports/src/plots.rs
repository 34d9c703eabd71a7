//! The suite's plots, drawn with plotters' SVG backend and inlined in the
//! index: attempt latency per provider, seeds to detect each naive design,
//! wasted provider work per design and policy, and race-window coverage.
//!
//! plotters is built without any font feature, so it measures text with
//! its own estimate and writes it as SVG `<text>`: no font file is read at
//! render time and the output is the same bytes on every machine. The SVG
//! namespace attribute (a URL, though never fetched) is dropped, since
//! inline SVG in HTML does not need it.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::mutants::Role;
use crate::suite::{ProviderLatency, SuiteReport};

const WIDTH_PX: u32 = 560;
const BAR_H_PX: u32 = 26;

/// Why a plot could not be drawn (plotters' own error, as text).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the plot {name}: {message}")]
pub struct PlotError {
    pub name: &'static str,
    pub message: String,
}

fn error(name: &'static str) -> impl Fn(Box<dyn std::fmt::Debug>) -> PlotError {
    move |e| PlotError {
        name,
        message: format!("{e:?}"),
    }
}

fn boxed<E: std::fmt::Debug + 'static>(e: E) -> Box<dyn std::fmt::Debug> {
    Box::new(e)
}

/// Removes the namespace attribute; an inline `<svg>` in HTML has it
/// implied.
pub(crate) fn inline(svg: String) -> String {
    svg.replace(r#" xmlns="http://www.w3.org/2000/svg""#, "")
}

/// One bar of a horizontal bar chart.
#[derive(Clone, Debug)]
pub struct Bar {
    pub value: f64,
    pub colour: RGBColor,
    /// Printed after the bar.
    pub label: String,
}

/// A chart with real numbers on both axes, drawn into an SVG string.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The label of the category whose band's centre is at `position`, for an
/// axis with a tick at every half band ([`String::new`] between).
fn band_label(labels: &[String], position: f64) -> String {
    let nearest = position.round();
    if (position - nearest).abs() < 0.01 && nearest >= 0.0 {
        labels.get(nearest as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

/// A horizontal bar chart: one row per category, one bar per series in
/// each row.
fn hbars(
    name: &'static str,
    caption: &str,
    x_desc: &str,
    categories: &[String],
    rows: &[Vec<Bar>],
) -> Result<String, PlotError> {
    let per_row = rows.iter().map(Vec::len).max().unwrap_or(1).max(1);
    let height =
        70 + categories.len().max(1) as u32 * BAR_H_PX * (per_row as u32).max(1) * 2 / 3 + 40;
    let max = rows
        .iter()
        .flatten()
        .map(|b| b.value)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, height)).into_drawing_area();
        root.fill(&WHITE).map_err(boxed).map_err(error(name))?;
        let n = categories.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(170)
            .build_cartesian_2d(0.0..max * 1.9, 0.0..n)
            .map_err(boxed)
            .map_err(error(name))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(categories.len().max(1) * 2 + 1)
            .y_label_formatter(&|y| band_label(categories, n - y - 0.5))
            .x_desc(x_desc)
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(boxed)
            .map_err(error(name))?;
        for (index, row) in rows.iter().enumerate() {
            draw_row(&mut chart, n - index as f64 - 0.1, row, max).map_err(error(name))?;
        }
        root.present().map_err(boxed).map_err(error(name))?;
    }
    Ok(inline(svg))
}

/// One category's bars, from `top` down, each with its label after it.
fn draw_row(
    chart: &mut Chart<'_, '_>,
    top: f64,
    row: &[Bar],
    max: f64,
) -> Result<(), Box<dyn std::fmt::Debug>> {
    let band = 0.8 / row.len().max(1) as f64;
    for (k, bar) in row.iter().enumerate() {
        let y1 = top - k as f64 * band;
        let y0 = y1 - band * 0.9;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, y0), (bar.value, y1)],
                bar.colour.filled(),
            )))
            .map_err(boxed)?;
        chart
            .draw_series(std::iter::once(Text::new(
                bar.label.clone(),
                (bar.value + max * 0.02, (y0 + y1) / 2.0 + band * 0.2),
                ("sans-serif", 11).into_font(),
            )))
            .map_err(boxed)?;
    }
    Ok(())
}

const BLUE: RGBColor = RGBColor(59, 130, 246);
const ORANGE: RGBColor = RGBColor(245, 158, 11);
const RED_: RGBColor = RGBColor(220, 38, 38);
const GREEN_: RGBColor = RGBColor(22, 163, 74);

/// Seeds the bench needed to catch each naive design (seed-major search).
pub fn seeds_to_detect(suite: &SuiteReport) -> Result<String, PlotError> {
    let mutants: Vec<_> = suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant)
        .collect();
    let categories: Vec<String> = mutants.iter().map(|d| d.design.clone()).collect();
    let rows: Vec<Vec<Bar>> = mutants
        .iter()
        .map(|d| {
            let caught = d.ok();
            vec![Bar {
                value: d.seeds_tried as f64,
                colour: if caught { BLUE } else { RED_ },
                label: if caught {
                    format!("{} ({} runs)", d.seeds_tried, d.runs_tried)
                } else {
                    format!("not caught in {}", d.seeds_tried)
                },
            }]
        })
        .collect();
    hbars(
        "seeds-to-detect",
        "Seeds to detect each naive design",
        "seeds tried, seed-major, until the first failing run",
        &categories,
        &rows,
    )
}

/// Runs of the correct design that reached each race window.
pub fn window_coverage(suite: &SuiteReport) -> Result<String, PlotError> {
    let categories: Vec<String> = suite
        .coverage
        .windows
        .iter()
        .map(|w| w.window.clone())
        .collect();
    let rows: Vec<Vec<Bar>> = suite
        .coverage
        .windows
        .iter()
        .map(|w| {
            vec![Bar {
                value: w.runs as f64,
                colour: if w.runs == 0 { RED_ } else { GREEN_ },
                label: if w.runs == 0 {
                    "never reached".to_owned()
                } else {
                    format!("{} runs, {} seeds", w.runs, w.seeds)
                },
            }]
        })
        .collect();
    hbars(
        "window-coverage",
        "Race windows reached (correct design)",
        "runs that reached the window",
        &categories,
        &rows,
    )
}

/// Billed executions beyond the winner's, per run, for each design under
/// each policy.
pub fn wasted_work(suite: &SuiteReport) -> Result<String, PlotError> {
    let policies: Vec<String> = {
        let mut p: Vec<String> = suite.waste.iter().map(|w| w.policy.clone()).collect();
        p.sort();
        p.dedup();
        // The default policy first.
        p.sort_by_key(|name| name != "strict");
        p
    };
    let categories: Vec<String> = suite.designs.iter().map(|d| d.name.clone()).collect();
    let rows: Vec<Vec<Bar>> = suite
        .designs
        .iter()
        .map(|d| {
            policies
                .iter()
                .enumerate()
                .filter_map(|(k, p)| {
                    let w = suite
                        .waste
                        .iter()
                        .find(|w| w.design == d.name && &w.policy == p)?;
                    let per_run = if w.runs == 0 {
                        0.0
                    } else {
                        w.wasted as f64 / w.runs as f64
                    };
                    Some(Bar {
                        value: per_run,
                        colour: if k == 0 { ORANGE } else { BLUE },
                        label: format!("{p}: {per_run:.2} ({} of {} billed)", w.wasted, w.billed),
                    })
                })
                .collect()
        })
        .collect();
    hbars(
        "wasted-work",
        "Wasted provider work per run",
        "billed executions beyond the winner's, per run",
        &categories,
        &rows,
    )
}

/// Attempt latency per provider (start to terminal state) over the
/// correct design's runs: box from the 25th to the 75th percentile,
/// median line, whiskers to the extremes.
pub fn latency(suite: &SuiteReport) -> Result<String, PlotError> {
    let name = "latency";
    let n = suite.latency.len().max(1);
    let max = suite
        .latency
        .iter()
        .map(|l| l.max_ms)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let labels: Vec<String> = suite
        .latency
        .iter()
        .map(|l| format!("{} ({} attempts)", l.provider, l.attempts))
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(boxed).map_err(error(name))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Attempt latency per provider (correct design)",
                ("sans-serif", 15),
            )
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, 0.0..max * 1.1)
            .map_err(boxed)
            .map_err(error(name))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| band_label(&labels, x - 0.5))
            .y_desc("ms, start to terminal state")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(boxed)
            .map_err(error(name))?;
        for (index, l) in suite.latency.iter().enumerate() {
            draw_box(&mut chart, index as f64 + 0.5, l).map_err(error(name))?;
        }
        root.present().map_err(boxed).map_err(error(name))?;
    }
    Ok(inline(svg))
}

/// One provider's box plot, centred on `centre`, with its median written
/// beside it.
fn draw_box(
    chart: &mut Chart<'_, '_>,
    centre: f64,
    l: &ProviderLatency,
) -> Result<(), Box<dyn std::fmt::Debug>> {
    let (left, right) = (centre - 0.2, centre + 0.2);
    let ms = |v: u64| v as f64;
    let quartiles = [(left, ms(l.p25_ms)), (right, ms(l.p75_ms))];
    chart
        .draw_series([
            Rectangle::new(quartiles, BLUE.mix(0.3).filled()),
            Rectangle::new(quartiles, BLUE.stroke_width(2)),
        ])
        .map_err(boxed)?;
    draw_median_and_whiskers(chart, centre, l)?;
    chart
        .draw_series(std::iter::once(Text::new(
            format!("median {} ms", l.median_ms),
            (right + 0.02, ms(l.median_ms)),
            ("sans-serif", 10).into_font(),
        )))
        .map_err(boxed)?;
    Ok(())
}

/// The box's median line and its whiskers (min to p25, p75 to max, with
/// caps), drawn over the quartile box and before the median's label.
fn draw_median_and_whiskers(
    chart: &mut Chart<'_, '_>,
    centre: f64,
    l: &ProviderLatency,
) -> Result<(), Box<dyn std::fmt::Debug>> {
    let (left, right) = (centre - 0.2, centre + 0.2);
    let ms = |v: u64| v as f64;
    let line = |points: Vec<(f64, f64)>, colour: RGBColor, width| {
        PathElement::new(points, colour.stroke_width(width))
    };
    chart
        .draw_series([
            line(
                vec![(left, ms(l.median_ms)), (right, ms(l.median_ms))],
                RED_,
                2,
            ),
            line(
                vec![(centre, ms(l.min_ms)), (centre, ms(l.p25_ms))],
                BLUE,
                1,
            ),
            line(
                vec![(centre, ms(l.p75_ms)), (centre, ms(l.max_ms))],
                BLUE,
                1,
            ),
            line(
                vec![(centre - 0.1, ms(l.min_ms)), (centre + 0.1, ms(l.min_ms))],
                BLUE,
                1,
            ),
            line(
                vec![(centre - 0.1, ms(l.max_ms)), (centre + 0.1, ms(l.max_ms))],
                BLUE,
                1,
            ),
        ])
        .map_err(boxed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::tests::input;

    #[test]
    fn plots_are_svg_with_the_data_and_no_url() {
        let suite = SuiteReport::new(input(Some(2)));
        for svg in [
            seeds_to_detect(&suite).expect("draws"),
            window_coverage(&suite).expect("draws"),
            wasted_work(&suite).expect("draws"),
            latency(&suite).expect("draws"),
        ] {
            assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
            assert!(!svg.contains("http"), "no URL");
        }
        let seeds = seeds_to_detect(&suite).expect("draws");
        assert!(seeds.contains("last-writer-wins"));
        assert!(seeds.contains("3 (6 runs)"), "{seeds}");
        assert!(
            window_coverage(&suite)
                .expect("draws")
                .contains("never reached")
        );
        assert_eq!(
            latency(&suite).expect("draws"),
            latency(&suite).expect("draws")
        );
    }
}

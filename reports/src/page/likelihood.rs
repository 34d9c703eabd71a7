//! The likelihood band of a failing run's page (`idem explain --report`):
//! P(fail) with the run's first decisions kept, along the run's simulated
//! time, with its 95% Wilson band, the threshold from which the failure
//! counts as likely, and the decisive decision marked.
//!
//! Drawn with plotters' SVG backend like the suite's plots, at the
//! timeline's width, so that the two read against each other.

use plotters::prelude::*;
use serde::Serialize;

use crate::plots::{PlotError, inline};

const WIDTH_PX: u32 = 1270;
const HEIGHT_PX: u32 = 220;
/// The left label area: as wide as the timeline's lane labels.
const LABEL_W_PX: u32 = 150;

/// What `idem explain` estimated, for the page.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Likelihood {
    /// Every estimate, in order of decisions kept.
    pub points: Vec<LikelihoodPoint>,
    /// P(fail) from which the failure counts as likely.
    pub likely_from: f64,
    pub decisive: Option<DecisiveMark>,
    /// When no draw decides the failure: what the run's own events force,
    /// and when.
    pub forced: Option<DecisiveMark>,
    pub samples: u32,
    /// The explanation in words, as the command printed it.
    pub text: String,
}

/// P(fail) with the first `kept` decisions kept; the last of them made at
/// `t_ms`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LikelihoodPoint {
    pub kept: usize,
    pub t_ms: u64,
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

/// The decision after which the failure became likely, or the event a
/// failure no draw decides turns on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecisiveMark {
    pub t_ms: u64,
    pub words: String,
}

impl Likelihood {
    /// The decisive decision's time and words, for the timeline's line.
    pub fn decisive_line(&self) -> Option<(u64, String)> {
        self.decisive.as_ref().map(|d| (d.t_ms, d.words.clone()))
    }
}

/// The band, as inline SVG, over `0..=sim_ms`.
pub fn band_svg(likelihood: &Likelihood, sim_ms: u64) -> Result<String, PlotError> {
    let fail = |e: String| PlotError {
        name: "likelihood",
        message: e,
    };
    let x_max = sim_ms.max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(format!("{e:?}")))?;
        let mut chart = ChartBuilder::on(&root)
            .margin_right(20)
            .margin_top(8)
            .x_label_area_size(28)
            .y_label_area_size(LABEL_W_PX)
            .build_cartesian_2d(0.0..x_max, 0.0..1.0)
            .map_err(|e| fail(format!("{e:?}")))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_desc("simulated ms (time of the last decision kept)")
            .y_desc("P(fail)")
            .y_labels(5)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
            .label_style(("sans-serif", 11))
            .draw()
            .map_err(|e| fail(format!("{e:?}")))?;
        draw_band(&mut chart, likelihood, x_max).map_err(|e| fail(format!("{e:?}")))?;
        root.present().map_err(|e| fail(format!("{e:?}")))?;
    }
    Ok(inline(svg))
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The band (low to high) and the estimate, then the marks.
fn draw_band(
    chart: &mut Chart<'_, '_>,
    likelihood: &Likelihood,
    x_max: f64,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let points = &likelihood.points;
    let outline: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.t_ms as f64, p.high))
        .chain(points.iter().rev().map(|p| (p.t_ms as f64, p.low)))
        .collect();
    let band = RGBColor(0x93, 0xc5, 0xfd);
    chart.draw_series(std::iter::once(Polygon::new(
        outline,
        band.mix(0.5).filled(),
    )))?;
    let line = RGBColor(0x1d, 0x4e, 0xd8);
    chart.draw_series(std::iter::once(PathElement::new(
        points
            .iter()
            .map(|p| (p.t_ms as f64, p.estimate))
            .collect::<Vec<_>>(),
        line.stroke_width(2),
    )))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new((p.t_ms as f64, p.estimate), 3, line.filled())),
    )?;
    draw_marks(chart, likelihood, x_max)
}

/// The threshold line and the decisive decision's mark.
fn draw_marks(
    chart: &mut Chart<'_, '_>,
    likelihood: &Likelihood,
    x_max: f64,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let grey = RGBColor(0x6b, 0x72, 0x80);
    chart.draw_series(std::iter::once(PathElement::new(
        vec![
            (0.0, likelihood.likely_from),
            (x_max, likelihood.likely_from),
        ],
        grey.stroke_width(1),
    )))?;
    if let Some(mark) = &likelihood.decisive {
        let red = RGBColor(0xdc, 0x26, 0x26);
        let x = mark.t_ms as f64;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, 0.0), (x, 1.0)],
            red.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("decisive, {} ms", mark.t_ms),
            (x, 0.08),
            ("sans-serif", 12).into_font().color(&red),
        )))?;
    }
    Ok(())
}

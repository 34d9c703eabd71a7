//! The timeline drawn as inline SVG by `templates/timeline.svg`: one
//! function here per element family (lanes, fault windows, spans, attempt
//! bars, arrows, marks, the divergence line) says where each element goes.
//!
//! Positions are computed for the whole history, so the picture stands
//! without script; the page's script recomputes them from the `data-t*`
//! attributes on zoom and pan.

use serde::Serialize;

use super::faults::fault_colour;
use super::model::{ArrowKind, AttemptBar, Overlay, Timeline};
use crate::html::state_colour;
use crate::template;

/// Left margin for lane names, px.
const LABEL_W_PX: u32 = 150;
/// Width of the time axis at the initial zoom, px.
const PLOT_W_PX: u32 = 1100;
const AXIS_H_PX: u32 = 22;
/// A lane's height without attempt rows, px.
const LANE_H_PX: u32 = 30;
/// One attempt row, px.
const ROW_H_PX: u32 = 14;
/// Where arrows attach inside a lane, px from its top.
const LANE_AXIS_PX: u32 = 14;

/// Where things go: lane tops and the time axis at the initial zoom.
struct Geometry<'a> {
    tops: Vec<u32>,
    height: u32,
    /// The time the drawing spans: the history and a little room after it
    /// for end labels.
    domain_ms: u64,
    overlay: &'a Overlay,
}

impl Geometry<'_> {
    /// The x of time `t`, to a tenth of a pixel.
    fn x(&self, t: u64) -> String {
        format!("{:.1}", self.x_px(t))
    }

    fn x_px(&self, t: u64) -> f64 {
        LABEL_W_PX as f64 + t as f64 * PLOT_W_PX as f64 / self.domain_ms as f64
    }

    /// The width from `t0` to `t1`, at least `min` pixels.
    fn width(&self, t0: u64, t1: u64, min: f64) -> String {
        format!("{:.1}", (self.x_px(t1) - self.x_px(t0)).max(min))
    }

    /// Where arrows attach in `lane`.
    fn axis(&self, lane: usize) -> u32 {
        self.tops[lane] + LANE_AXIS_PX
    }

    /// `" ev"` when any of `seqs` is a violation's evidence.
    fn ev(&self, seqs: &[u64]) -> &'static str {
        if seqs.iter().any(|s| self.overlay.evidence.contains(s)) {
            " ev"
        } else {
            ""
        }
    }
}

/// The `data-seq` attribute: seqs separated by spaces.
fn seq_attr(seqs: &[u64]) -> String {
    seqs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Everything `timeline.svg` prints.
#[derive(Serialize)]
struct SvgView<'a> {
    width: u32,
    height: u32,
    label_w: u32,
    plot_w: u32,
    plot_right: u32,
    axis_h: u32,
    domain_ms: u64,
    lanes: Vec<LaneView<'a>>,
    faults: Vec<FaultView<'a>>,
    spans: Vec<SpanView<'a>>,
    attempts: Vec<BarView<'a>>,
    arrows: Vec<ArrowView<'a>>,
    marks: Vec<MarkView<'a>>,
    divergence: Option<LineView<'a>>,
    decisive: Option<LineView<'a>>,
}

impl Timeline {
    fn lane_height(&self, lane: usize) -> u32 {
        LANE_H_PX + self.lanes[lane].rows * ROW_H_PX
    }

    fn geometry<'a>(&self, overlay: &'a Overlay) -> Geometry<'a> {
        let mut tops = Vec::with_capacity(self.lanes.len());
        let mut y = AXIS_H_PX;
        for lane in 0..self.lanes.len() {
            tops.push(y);
            y += self.lane_height(lane);
        }
        Geometry {
            tops,
            height: y + 8,
            domain_ms: self.end_ms + self.end_ms / 20 + 1,
            overlay,
        }
    }

    /// Draws the timeline as inline SVG, `overlay` marking the evidence
    /// and the first divergence.
    pub fn to_svg(&self, overlay: &Overlay) -> String {
        let g = self.geometry(overlay);
        let view = SvgView {
            width: LABEL_W_PX + PLOT_W_PX + 20,
            height: g.height,
            label_w: LABEL_W_PX,
            plot_w: PLOT_W_PX,
            plot_right: LABEL_W_PX + PLOT_W_PX,
            axis_h: AXIS_H_PX,
            domain_ms: g.domain_ms,
            lanes: self.lane_views(&g),
            faults: self.fault_views(&g),
            spans: self.span_views(&g),
            attempts: self.attempts.iter().map(|b| self.bar_view(&g, b)).collect(),
            arrows: self.arrow_views(&g),
            marks: self.mark_views(&g),
            divergence: line_view(&g, overlay.divergence.as_ref()),
            decisive: line_view(&g, overlay.decisive.as_ref()),
        };
        template::render("timeline.svg", view)
    }
}

/// A lane's band, axis and name.
#[derive(Serialize)]
struct LaneView<'a> {
    host: &'a str,
    top: u32,
    height: u32,
    fill: &'static str,
    axis: u32,
}

impl Timeline {
    fn lane_views(&self, g: &Geometry<'_>) -> Vec<LaneView<'_>> {
        self.lanes
            .iter()
            .enumerate()
            .map(|(index, lane)| LaneView {
                host: &lane.host,
                top: g.tops[index],
                height: self.lane_height(index),
                fill: if index % 2 == 0 { "#ffffff" } else { "#f8fafc" },
                axis: g.axis(index),
            })
            .collect()
    }
}

/// A fault window's shading on one lane, and its label.
#[derive(Serialize)]
struct FaultView<'a> {
    name: &'a str,
    class: &'static str,
    ev: &'static str,
    /// Where it starts.
    at: At,
    width: String,
    top: u32,
    height: u32,
    colour: &'static str,
    t0_ms: u64,
    t1_ms: u64,
    healed: bool,
    seqs: String,
}

impl Timeline {
    fn fault_views(&self, g: &Geometry<'_>) -> Vec<FaultView<'_>> {
        self.faults
            .iter()
            .flat_map(|fault| {
                fault.lanes.iter().map(move |&lane| FaultView {
                    name: &fault.name,
                    class: if fault.name == "down" {
                        "fault down"
                    } else {
                        "fault"
                    },
                    ev: g.ev(&fault.seqs),
                    at: At {
                        t_ms: fault.t0_ms,
                        x: g.x(fault.t0_ms),
                    },
                    width: g.width(fault.t0_ms, fault.t1_ms, 1.0),
                    top: g.tops[lane],
                    height: self.lane_height(lane),
                    colour: fault_colour(&fault.name),
                    t0_ms: fault.t0_ms,
                    t1_ms: fault.t1_ms,
                    healed: fault.healed,
                    seqs: seq_attr(&fault.seqs),
                })
            })
            .collect()
    }
}

/// An HTTP request being served or a provider execution: a thin bar above
/// or below the lane's axis.
#[derive(Serialize)]
struct SpanView<'a> {
    class: &'static str,
    ev: &'static str,
    x0: String,
    width: String,
    y: u32,
    t0_ms: u64,
    t1_ms: u64,
    seqs: String,
    title: &'a str,
}

impl Timeline {
    fn span_views(&self, g: &Geometry<'_>) -> Vec<SpanView<'_>> {
        self.spans
            .iter()
            .map(|span| {
                let axis = g.axis(span.lane);
                let (y, class) = match span.class {
                    "exec" => (axis + 3, "span-exec"),
                    _ => (axis - 3, "span-http"),
                };
                SpanView {
                    class,
                    ev: g.ev(&span.seqs),
                    x0: g.x(span.t0_ms),
                    width: g.width(span.t0_ms, span.t1_ms, 2.0),
                    y,
                    t0_ms: span.t0_ms,
                    t1_ms: span.t1_ms,
                    seqs: seq_attr(&span.seqs),
                    title: &span.title,
                }
            })
            .collect()
    }
}

/// An attempt's bar: a rectangle per state, its end (or an arrowhead when
/// it was still open), its label, and the starts it refused.
#[derive(Serialize)]
struct BarView<'a> {
    attempt_id: &'a str,
    label: String,
    y: u32,
    segments: Vec<SegmentView<'a>>,
    end: Option<EndView<'a>>,
    /// The state it was still in when the history ended, if open.
    open: Option<OpenView<'a>>,
    label_at: Option<At>,
    blocked: Vec<BlockedView<'a>>,
}

#[derive(Serialize)]
struct SegmentView<'a> {
    state: &'a str,
    ev: &'static str,
    x0: String,
    width: String,
    fill: &'static str,
    colour: &'static str,
    t0_ms: u64,
    t1_ms: u64,
    seq: u64,
    /// Still open when the history ended.
    open: bool,
}

/// A time and its x.
#[derive(Serialize)]
struct At {
    t_ms: u64,
    x: String,
}

#[derive(Serialize)]
struct EndView<'a> {
    state: &'a str,
    ev: &'static str,
    colour: &'static str,
    seq: u64,
    at: At,
}

#[derive(Serialize)]
struct OpenView<'a> {
    state: &'a str,
    seq: u64,
    at: At,
}

#[derive(Serialize)]
struct BlockedView<'a> {
    ev: &'static str,
    seq: u64,
    what: &'a str,
    at: At,
}

impl Timeline {
    fn bar_view<'a>(&self, g: &Geometry<'_>, bar: &'a AttemptBar) -> BarView<'a> {
        let at = |t: u64| At { t_ms: t, x: g.x(t) };
        BarView {
            attempt_id: &bar.attempt_id,
            label: format!(
                "job {} · attempt {} · {}",
                bar.job, bar.number, bar.provider
            ),
            y: g.tops[bar.lane] + LANE_H_PX - 4 + bar.row * ROW_H_PX,
            segments: self.segment_views(g, bar),
            end: bar.end.as_ref().map(|(state, t, seq)| EndView {
                state,
                ev: g.ev(&[*seq]),
                colour: state_colour(state),
                seq: *seq,
                at: at(*t),
            }),
            open: match (&bar.end, bar.segments.last()) {
                (None, Some(last)) => Some(OpenView {
                    state: &last.state,
                    seq: last.seq,
                    at: at(self.end_ms),
                }),
                _ => None,
            },
            label_at: bar.segments.first().map(|s| at(s.t0_ms)),
            blocked: bar
                .blocked
                .iter()
                .map(|(t, seq, what)| BlockedView {
                    ev: g.ev(&[*seq]),
                    seq: *seq,
                    what,
                    at: at(*t),
                })
                .collect(),
        }
    }
}

impl Timeline {
    /// A bar's states, a rectangle each (unknown striped).
    fn segment_views<'a>(&self, g: &Geometry<'_>, bar: &'a AttemptBar) -> Vec<SegmentView<'a>> {
        bar.segments
            .iter()
            .map(|s| SegmentView {
                state: &s.state,
                ev: g.ev(&[s.seq]),
                x0: g.x(s.t0_ms),
                width: g.width(s.t0_ms, s.t1_ms, 2.0),
                fill: if s.state == "unknown" {
                    "url(#stripes)"
                } else {
                    state_colour(&s.state)
                },
                colour: state_colour(&s.state),
                t0_ms: s.t0_ms,
                t1_ms: s.t1_ms,
                seq: s.seq,
                open: bar.end.is_none() && s.t1_ms >= self.end_ms,
            })
            .collect()
    }
}

/// A message from one lane to another.
#[derive(Serialize)]
struct ArrowView<'a> {
    class: &'static str,
    ev: &'static str,
    x: String,
    y1: u32,
    y2: u32,
    t_ms: u64,
    seqs: String,
    title: &'a str,
}

impl Timeline {
    fn arrow_views(&self, g: &Geometry<'_>) -> Vec<ArrowView<'_>> {
        self.arrows
            .iter()
            .map(|arrow| {
                let (y1, y2) = (g.axis(arrow.from), g.axis(arrow.to));
                ArrowView {
                    class: match arrow.kind {
                        ArrowKind::Request | ArrowKind::Dispatch => "msg",
                        ArrowKind::ResponseOk => "msg resp-ok",
                        ArrowKind::ResponseError => "msg resp-err",
                        ArrowKind::StoreCall => "msg store",
                        ArrowKind::LostAck => "msg lost",
                    },
                    ev: g.ev(&arrow.seqs),
                    x: g.x(arrow.t_ms),
                    y1,
                    // The head stops short of the lane's axis.
                    y2: if y2 > y1 { y2 - 2 } else { y2 + 2 },
                    t_ms: arrow.t_ms,
                    seqs: seq_attr(&arrow.seqs),
                    title: &arrow.title,
                }
            })
            .collect()
    }
}

/// A point event: a glyph on a lane.
#[derive(Serialize)]
struct MarkView<'a> {
    glyph: &'static str,
    colour: &'static str,
    ev: &'static str,
    y: u32,
    seqs: String,
    title: &'a str,
    at: At,
}

impl Timeline {
    fn mark_views(&self, g: &Geometry<'_>) -> Vec<MarkView<'_>> {
        self.marks
            .iter()
            .map(|mark| MarkView {
                glyph: mark.glyph,
                colour: mark.colour,
                ev: g.ev(&mark.seqs),
                y: g.axis(mark.lane) - 3,
                seqs: seq_attr(&mark.seqs),
                title: &mark.title,
                at: At {
                    t_ms: mark.t_ms,
                    x: g.x(mark.t_ms),
                },
            })
            .collect()
    }
}

/// A labelled line across every lane at one time: where the run parts
/// from the run it is compared with, or the decisive decision.
#[derive(Serialize)]
struct LineView<'a> {
    label: &'a str,
    at: At,
}

fn line_view<'a>(g: &Geometry<'_>, line: Option<&'a (u64, String)>) -> Option<LineView<'a>> {
    line.map(|(t, label)| LineView {
        label,
        at: At {
            t_ms: *t,
            x: g.x(*t),
        },
    })
}

//! What every HTML page shares: escaping, the page shell with its inline
//! style and script, and the provenance block.
//!
//! Pages are self-contained: style, script and pictures are inline, and
//! nothing names a network address, so a page opens from a file on a
//! machine with no network and looks the same in ten years. They are also
//! deterministic: everything but the provenance block is a function of the
//! suite's results, and the provenance block sits between two markers
//! ([`PROVENANCE_OPEN`], [`PROVENANCE_CLOSE`]) so that a comparison can
//! leave out exactly it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Opens the only part of a page that may differ between two renderings
/// of the same suite.
pub const PROVENANCE_OPEN: &str = "<!-- provenance -->";
/// Closes it.
pub const PROVENANCE_CLOSE: &str = "<!-- /provenance -->";

/// Which build ran the suite, how it was asked to, and how fast it went.
/// The command line fills it; nothing else in a report depends on it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The `idem` version.
    pub version: String,
    /// The source commit the build came from, as the build knows it.
    pub commit: String,
    /// The command line, as typed.
    pub command_line: String,
    /// `A..B`, end excluded.
    pub seeds: String,
    /// Wall-clock figures; they differ from run to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub performance: Option<Performance>,
}

/// How fast the suite ran, measured by the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Performance {
    pub wall_ms: u64,
    pub threads: u64,
    pub runs: u64,
    /// Simulation steps over all runs.
    pub steps: u64,
    /// Simulated milliseconds over all runs.
    pub sim_ms: u64,
}

impl Performance {
    fn per_second(&self, count: u64) -> f64 {
        if self.wall_ms == 0 {
            return 0.0;
        }
        count as f64 * 1000.0 / self.wall_ms as f64
    }
}

impl Provenance {
    /// The block as HTML, between the markers.
    pub fn to_html(&self) -> String {
        let mut out = String::new();
        out.push_str(PROVENANCE_OPEN);
        out.push_str("<section class=\"provenance\"><h2>Provenance</h2><table>");
        let mut row = |name: &str, value: &str| {
            let _ = write!(
                out,
                "<tr><th>{}</th><td><code>{}</code></td></tr>",
                esc(name),
                esc(value)
            );
        };
        row("version", &self.version);
        row("commit", &self.commit);
        row("command", &self.command_line);
        row("seeds", &self.seeds);
        if let Some(p) = &self.performance {
            row(
                "performance",
                &format!(
                    "{} runs on {} threads in {:.1} s wall: {:.1} runs/s, {:.0} steps/s, {:.0} simulated s per wall s",
                    p.runs,
                    p.threads,
                    p.wall_ms as f64 / 1000.0,
                    p.per_second(p.runs),
                    p.per_second(p.steps),
                    p.per_second(p.sim_ms) / 1000.0,
                ),
            );
        }
        out.push_str("</table></section>");
        out.push_str(PROVENANCE_CLOSE);
        out
    }

    /// The block as Markdown, between the same markers (HTML comments are
    /// invisible in a rendered pull-request comment).
    pub fn to_markdown(&self) -> String {
        let mut out = format!("{PROVENANCE_OPEN}\n");
        let _ = writeln!(
            out,
            "<sub>idem {} ({}), seeds {}: `{}`</sub>",
            self.version, self.commit, self.seeds, self.command_line
        );
        if let Some(p) = &self.performance {
            let _ = writeln!(
                out,
                "<sub>{} runs in {:.1} s wall on {} threads ({:.1} runs/s)</sub>",
                p.runs,
                p.wall_ms as f64 / 1000.0,
                p.threads,
                p.per_second(p.runs)
            );
        }
        out.push_str(PROVENANCE_CLOSE);
        out.push('\n');
        out
    }
}

/// Removes every provenance block (markers included) from `text`: what
/// two renderings of one suite must agree on.
pub fn without_provenance(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(PROVENANCE_OPEN) {
        out.push_str(&rest[..start]);
        match rest[start..].find(PROVENANCE_CLOSE) {
            Some(end) => rest = &rest[start + end + PROVENANCE_CLOSE.len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON made safe inside `<script type="application/json">`: `<` can
/// only occur inside JSON strings, where `\u003c` means the same.
pub fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c")
}

/// A whole page: the shell, the shared style, `body`, and the shared
/// script. `title` is plain text.
pub fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + STYLE.len() + SCRIPT.len() + 256);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    out.push_str("<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n");
    out.push_str(body);
    out.push_str("\n<div id=\"tip\" hidden></div>\n<script>");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
    out
}

/// The colour of each attempt state, shared by the timeline, the legend
/// and the CAS chain.
pub const STATE_COLOURS: &[(&str, &str)] = &[
    ("starting", "#94a3b8"),
    ("running", "#3b82f6"),
    ("unknown", "#f59e0b"),
    ("succeeded", "#16a34a"),
    ("failed", "#dc2626"),
    ("cancelled", "#6b7280"),
    ("lost", "#8b5cf6"),
];

/// The colour of `state` (grey for one this report does not know).
pub fn state_colour(state: &str) -> &'static str {
    STATE_COLOURS
        .iter()
        .find(|(name, _)| *name == state)
        .map_or("#a3a3a3", |(_, colour)| colour)
}

const STYLE: &str = r#"
:root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--pass:#15803d;--fail:#b91c1c;--warn:#b45309;--bg:#fff;--panel:#f9fafb}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0;padding:16px 24px 48px}
h1{font-size:22px;margin:4px 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
a{color:#1d4ed8}code,pre,.mono{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:var(--panel);border:1px solid var(--line);padding:8px;overflow:auto;max-height:420px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}th{background:var(--panel);font-weight:600}
td.num,th.num{text-align:right}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px;color:#fff}
.pass{background:var(--pass)}.fail{background:var(--fail)}.error{background:var(--warn)}
.cell-pass{background:#ecfdf5}.cell-fail{background:#fef2f2;font-weight:600}.cell-error{background:#fffbeb}
.muted{color:var(--muted)}.note{background:#fffbeb;border:1px solid #fcd34d;padding:6px 10px;margin:8px 0}
.summary{display:flex;flex-wrap:wrap;gap:8px 24px;margin:8px 0}.summary div{white-space:nowrap}
.repro{background:#111827;color:#f9fafb;padding:6px 10px;border-radius:4px;display:inline-block;user-select:all}
.plots{display:flex;flex-wrap:wrap;gap:16px}.plots figure{margin:0;border:1px solid var(--line);padding:6px}.plots figcaption{font-size:12px;color:var(--muted);max-width:520px}
.timeline-wrap{border:1px solid var(--line);overflow:hidden;position:relative;background:#fff}
.timeline-tools{margin:6px 0;display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.timeline-tools button{font:inherit;padding:2px 10px}
svg.timeline{display:block;cursor:grab;user-select:none}svg.timeline.dragging{cursor:grabbing}
svg.timeline text{font:11px system-ui,sans-serif;fill:#374151}
svg.timeline .lane-label{font-weight:600;fill:#111827}
svg.timeline .axis{stroke:#d1d5db}svg.timeline .tick text{fill:#6b7280;font-size:10px}
svg.timeline .tick line{stroke:#f3f4f6}
svg.timeline .msg{stroke:#64748b;stroke-width:1}svg.timeline .msg.store{stroke:#0f766e}
svg.timeline .msg.resp-ok{stroke:#15803d}svg.timeline .msg.resp-err{stroke:#c2410c}
svg.timeline .msg.lost{stroke:#b91c1c;stroke-dasharray:3 2}
svg.timeline .span-http{fill:#cbd5e1}svg.timeline .span-exec{fill:#c7d2fe}
svg.timeline .fault{opacity:.18}svg.timeline .fault-label{font-size:10px;fill:#7c2d12}
svg.timeline .down{fill:url(#down)}
svg.timeline .mark{font-size:12px;font-weight:700}
svg.timeline .ev{stroke:#e11d48!important;stroke-width:2.5px!important}
svg.timeline text.ev{fill:#e11d48;stroke:none!important}
svg.timeline .hl{stroke:#e11d48;stroke-width:3px}
svg.timeline .diverge{stroke:#7c3aed;stroke-width:1.5;stroke-dasharray:6 3}
svg.timeline [data-seq]:hover{filter:brightness(.8)}
#tip{position:fixed;z-index:10;max-width:640px;background:#111827;color:#f9fafb;padding:6px 8px;border-radius:4px;font:11px/1.35 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;word-break:break-all;pointer-events:none}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin:4px 0}.legend span.sw{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:middle;border:1px solid #0002}
tr.ev td{background:#fff1f2}tr.first-diverge td{background:#ede9fe;font-weight:600}
tr.gap td{color:var(--muted)}
.diff td{font:12px ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
.diff td:nth-child(3),.diff td:nth-child(7){white-space:normal;word-break:break-all;max-width:460px}
.diff td.only{background:#fef9c3}
.violation{border-left:4px solid var(--fail);padding:4px 10px;margin:8px 0;background:#fef2f2}
.violation button{font:inherit;font-size:12px}
.chain td.lost,.chain td.overwrite{color:var(--fail);font-weight:600}
section.provenance{margin-top:32px;color:var(--muted)}
"#;

/// Tooltips for any element with `data-seq` (the trace events are in a
/// `<script type="application/json" id="events">` of the page), zoom and
/// pan of every `svg.timeline`, and evidence highlighting.
const SCRIPT: &str = r#"
(function(){
"use strict";
var data=document.getElementById('events');
var events=data?JSON.parse(data.textContent):[];
var bySeq={};events.forEach(function(e){bySeq[e.seq]=e;});
var tip=document.getElementById('tip');
function seqs(el){var s=el.getAttribute('data-seq');return s?s.split(' ').map(Number):[];}
document.addEventListener('mouseover',function(ev){
  var el=ev.target.closest?ev.target.closest('[data-seq]'):null;
  if(!el){tip.hidden=true;return;}
  var lines=seqs(el).map(function(s){return bySeq[s]?JSON.stringify(bySeq[s]):('event '+s);});
  var title=el.getAttribute('data-title');
  tip.textContent=(title?title+'\n':'')+lines.join('\n');
  tip.hidden=false;
});
document.addEventListener('mousemove',function(ev){
  if(tip.hidden)return;
  var x=ev.clientX+14,y=ev.clientY+14;
  if(x+tip.offsetWidth>window.innerWidth)x=Math.max(0,ev.clientX-tip.offsetWidth-14);
  if(y+tip.offsetHeight>window.innerHeight)y=Math.max(0,ev.clientY-tip.offsetHeight-14);
  tip.style.left=x+'px';tip.style.top=y+'px';
});
document.querySelectorAll('svg.timeline').forEach(function(svg){
  var x0=+svg.getAttribute('data-x0'),w=+svg.getAttribute('data-w'),end=+svg.getAttribute('data-end');
  var view={from:0,to:end};
  function X(t){return x0+(t-view.from)*w/(view.to-view.from);}
  function layout(){
    svg.querySelectorAll('[data-t0]').forEach(function(el){
      var a=X(+el.getAttribute('data-t0')),b=X(+el.getAttribute('data-t1'));
      var min=+(el.getAttribute('data-minw')||1);
      el.setAttribute('x',a);el.setAttribute('width',Math.max(b-a,min));
    });
    svg.querySelectorAll('line[data-t]').forEach(function(el){var x=X(+el.getAttribute('data-t'));el.setAttribute('x1',x);el.setAttribute('x2',x);});
    svg.querySelectorAll('g[data-t]').forEach(function(el){el.setAttribute('transform','translate('+X(+el.getAttribute('data-t'))+',0)');});
    var ticks=svg.querySelector('g.ticks');
    if(ticks){
      var span=view.to-view.from,step=Math.pow(10,Math.floor(Math.log10(span/8)));
      [1,2,5,10].some(function(m){if(span/(step*m)<=10){step*=m;return true;}return false;});
      var h=+svg.getAttribute('height'),html='';
      for(var t=Math.ceil(view.from/step)*step;t<=view.to;t+=step){
        var x=X(t);
        html+='<g class="tick"><line x1="'+x+'" x2="'+x+'" y1="16" y2="'+h+'"></line><text x="'+(x+2)+'" y="12">'+(step>=1000?(t/1000)+' s':t+' ms')+'</text></g>';
      }
      ticks.innerHTML=html;
    }
    var label=svg.parentNode.parentNode.querySelector('.zoom-label');
    if(label)label.textContent=Math.round(view.from)+' to '+Math.round(view.to)+' ms';
  }
  function zoom(factor,at){
    var span=view.to-view.from,ns=Math.min(end,Math.max(5,span*factor));
    var from=at-(at-view.from)*ns/span;
    from=Math.max(0,Math.min(end-ns,from));
    view.from=from;view.to=from+ns;layout();
  }
  function timeAt(clientX){var r=svg.getBoundingClientRect();return view.from+(clientX-r.left-x0)*(view.to-view.from)/w;}
  svg.addEventListener('wheel',function(ev){ev.preventDefault();zoom(ev.deltaY<0?0.8:1.25,timeAt(ev.clientX));},{passive:false});
  var drag=null;
  svg.addEventListener('mousedown',function(ev){drag={x:ev.clientX,from:view.from,to:view.to};svg.classList.add('dragging');});
  window.addEventListener('mouseup',function(){drag=null;svg.classList.remove('dragging');});
  window.addEventListener('mousemove',function(ev){
    if(!drag)return;
    var dt=(ev.clientX-drag.x)*(drag.to-drag.from)/w,span=drag.to-drag.from;
    var from=Math.max(0,Math.min(end-span,drag.from-dt));view.from=from;view.to=from+span;layout();
  });
  var tools=svg.parentNode.parentNode.querySelector('.timeline-tools');
  if(tools){
    tools.querySelectorAll('button[data-zoom]').forEach(function(b){
      b.addEventListener('click',function(){
        var z=b.getAttribute('data-zoom');
        if(z==='reset'){view.from=0;view.to=end;layout();}
        else zoom(+z,(view.from+view.to)/2);
      });
    });
  }
  svg.focusOn=function(t0,t1){var pad=Math.max(20,(t1-t0)*0.3);view.from=Math.max(0,t0-pad);view.to=Math.min(end,t1+pad);if(view.to-view.from<5){view.to=view.from+5;}layout();};
  layout();
});
document.querySelectorAll('[data-evidence]').forEach(function(button){
  button.addEventListener('click',function(){
    var want=button.getAttribute('data-evidence').split(' ').map(Number);
    document.querySelectorAll('svg.timeline .hl').forEach(function(el){el.classList.remove('hl');});
    var t0=Infinity,t1=-Infinity;
    document.querySelectorAll('svg.timeline [data-seq]').forEach(function(el){
      if(seqs(el).some(function(s){return want.indexOf(s)>=0;})){el.classList.add('hl');}
    });
    want.forEach(function(s){var e=bySeq[s];if(e){t0=Math.min(t0,e.t_ms);t1=Math.max(t1,e.t_ms);}});
    var svg=document.querySelector('svg.timeline');
    if(svg&&svg.focusOn&&t0<=t1){svg.focusOn(t0,t1);svg.scrollIntoView({block:'nearest'});}
  });
});
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_script_breakouts() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(
            script_json(r#"{"a":"</script>"}"#),
            r#"{"a":"\u003c/script>"}"#
        );
    }

    #[test]
    fn provenance_is_cut_out_exactly() {
        let provenance = Provenance {
            version: "0.1.0".into(),
            commit: "abc".into(),
            command_line: "idem report".into(),
            seeds: "0..3".into(),
            performance: None,
        };
        let page = format!("<p>a</p>{}<p>b</p>", provenance.to_html());
        assert_eq!(without_provenance(&page), "<p>a</p><p>b</p>");
        let markdown = format!("x\n{}y\n", provenance.to_markdown());
        assert_eq!(without_provenance(&markdown), "x\n\ny\n");
    }

    #[test]
    fn pages_name_no_network_address() {
        let page = page("t", "<p>body</p>");
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(page.contains("<p>body</p>"));
    }
}

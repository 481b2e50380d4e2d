//! A [`Frame`] as HTML: summary tiles, two plotters SVG charts (decisions per second with
//! allowed and denied stacked; limiter latency percentiles, per shard on a Cluster) and the
//! tables. Everything user-supplied (tenant and policy names) is escaped.

use std::fmt::Write as _;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::view::{max_bound_ms, DeniedSubjects, Frame, Latency, Scope, Top};
use crate::telemetry::recorder::Outcome;

const ALLOWED: RGBColor = RGBColor(31, 122, 77);
const DENIED: RGBColor = RGBColor(196, 61, 50);
const GRID: RGBColor = RGBColor(225, 232, 232);
const SHARD_COLORS: [RGBColor; 6] = [
    RGBColor(110, 84, 160),
    RGBColor(200, 130, 20),
    RGBColor(20, 140, 170),
    RGBColor(150, 90, 60),
    RGBColor(170, 60, 130),
    RGBColor(90, 110, 40),
];
const WIDTH: u32 = 760;
const HEIGHT: u32 = 280;

/// Escapes text for HTML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
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

/// `HH:MM:SS` (UTC) of a Unix second; `HH:MM` when `minutes`.
fn clock(t: i64, minutes: bool) -> String {
    let d = t.rem_euclid(86_400);
    if minutes {
        format!("{:02}:{:02}", d / 3600, d / 60 % 60)
    } else {
        format!("{:02}:{:02}:{:02}", d / 3600, d / 60 % 60, d % 60)
    }
}

/// A number with a unit prefix: 950, 12.3k, 4.5M.
fn short(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.0}k", n / 1e3)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else if n >= 10.0 || n == n.trunc() {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.2} ms")
    } else if v < 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

fn fail(e: &dyn std::fmt::Debug) -> String {
    format!("cannot draw the chart: {e:?}")
}

/// Decisions per second, allowed stacked on denied.
pub fn decisions_svg(frame: &Frame) -> Result<String, String> {
    let mut svg = String::new();
    let tips = draw_decisions(frame, &mut svg)?;
    Ok(with_tips(svg, &tips))
}

/// The series drawn in the decisions chart, for its legend.
const DECISION_SERIES: [(&str, RGBColor); 2] = [("allowed", ALLOWED), ("denied", DENIED)];

fn draw_decisions(frame: &Frame, svg: &mut String) -> Result<Tips, String> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let bin = frame.bin_seconds as f64;
    let rate = |p: &super::view::Point, o: Outcome| p.counts[o.index()] as f64 / bin;
    let peak = frame
        .points
        .iter()
        .map(|p| rate(p, Outcome::Allowed) + rate(p, Outcome::Denied))
        .fold(0.0_f64, f64::max);
    let top = (peak * 1.35).max(1.0);
    let mut chart = axes(&root, frame, top, "decisions per second", &|v| short(*v))?;
    let at = |p: &super::view::Point| p.t as f64;
    chart
        .draw_series(AreaSeries::new(
            frame
                .points
                .iter()
                .map(|p| (at(p), rate(p, Outcome::Allowed) + rate(p, Outcome::Denied))),
            0.0,
            ALLOWED.mix(0.55),
        ))
        .map_err(|e| fail(&e))?;
    chart
        .draw_series(AreaSeries::new(
            frame
                .points
                .iter()
                .map(|p| (at(p), rate(p, Outcome::Denied))),
            0.0,
            DENIED.mix(0.75),
        ))
        .map_err(|e| fail(&e))?;
    let tips = tips(&chart, frame, top, |p| {
        format!(
            "{}: {} allowed/s, {} denied/s",
            clock(p.t, false),
            short(rate(p, Outcome::Allowed)),
            short(rate(p, Outcome::Denied))
        )
    });
    root.present().map_err(|e| fail(&e))?;
    Ok(tips)
}

/// Each point's x on the chart and what it says on hover; the plot's top and bottom.
struct Tips {
    points: Vec<(i32, String)>,
    top: i32,
    bottom: i32,
}

fn tips(
    chart: &Chart<'_, '_>,
    frame: &Frame,
    top: f64,
    say: impl Fn(&super::view::Point) -> String,
) -> Tips {
    let points = frame
        .points
        .iter()
        .map(|p| (chart.backend_coord(&(p.t as f64, 0.0)).0, say(p)))
        .collect();
    let (_, y_top) = chart.backend_coord(&(0.0, top));
    let (_, y_bottom) = chart.backend_coord(&(0.0, 0.0));
    Tips {
        points,
        top: y_top,
        bottom: y_bottom,
    }
}

/// Adds a transparent column over each point of the chart whose `<title>` the browser shows
/// when the pointer rests there: the values behind the lines, read on hover.
fn with_tips(mut svg: String, tips: &Tips) -> String {
    let xs: Vec<i32> = tips.points.iter().map(|(x, _)| *x).collect();
    let mut group = String::from(r#"<g class="tips" data-testid="chart-tips">"#);
    for (i, (x, text)) in tips.points.iter().enumerate() {
        let before = if i > 0 {
            xs[i - 1]
        } else {
            x - (xs.get(1).unwrap_or(x) - x)
        };
        let after = xs.get(i + 1).copied().unwrap_or(x + (x - before));
        let left = (before + x) / 2;
        let right = ((x + after) / 2).max(left + 1);
        let _ = write!(
            group,
            r#"<rect x="{left}" y="{}" width="{}" height="{}" fill="transparent" pointer-events="all"><title>{}</title></rect>"#,
            tips.top,
            right - left,
            (tips.bottom - tips.top).max(1),
            escape(text)
        );
    }
    group.push_str("</g>");
    if let Some(end) = svg.rfind("</svg>") {
        svg.insert_str(end, &group);
    }
    svg
}

/// The legend under a chart, in HTML: it never covers the lines, and reads at any size.
fn legend_html(series: &[(String, RGBColor)]) -> String {
    let mut out = String::from(r#"<ul class="legend">"#);
    for (label, RGBColor(r, g, b)) in series {
        let _ = write!(
            out,
            r##"<li><svg width="16" height="10" aria-hidden="true"><rect width="16" height="10" fill="#{r:02x}{g:02x}{b:02x}"/></svg>{}</li>"##,
            escape(label)
        );
    }
    out.push_str("</ul>");
    out
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart over the frame's time span from 0 to `top`, with its grid and labelled axes.
fn axes<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    frame: &Frame,
    top: f64,
    y_desc: &str,
    value: &dyn Fn(&f64) -> String,
) -> Result<Chart<'a, 'b>, String> {
    let (x0, x1) = span(frame);
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(76)
        .build_cartesian_2d(x0..x1, 0.0..top)
        .map_err(|e| fail(&e))?;
    let minutes = frame.range == app::dashboard::Range::Day;
    let time = |t: &f64| clock(t.round() as i64, minutes);
    chart
        .configure_mesh()
        .x_desc("time (UTC)")
        .y_desc(y_desc)
        .x_labels(6)
        .y_labels(5)
        .x_label_formatter(&time)
        .y_label_formatter(value)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .light_line_style(WHITE)
        .bold_line_style(GRID)
        .draw()
        .map_err(|e| fail(&e))?;
    Ok(chart)
}

/// The x range of a frame's charts: its first second to one bin past its last point.
fn span(frame: &Frame) -> (f64, f64) {
    let first = frame.points.first().map_or(0, |p| p.t) as f64;
    let last = frame.points.last().map_or(1, |p| p.t) as f64;
    (first, last.max(first + 1.0))
}

/// Limiter round-trip percentiles over time, and each shard's p99 on a Cluster.
pub fn latency_svg(frame: &Frame) -> Result<String, String> {
    let mut svg = String::new();
    let tips = draw_latency(frame, &mut svg)?;
    Ok(with_tips(svg, &tips))
}

/// The series drawn in the latency chart, for its legend.
fn latency_series(frame: &Frame) -> Vec<(String, RGBColor)> {
    let mut series: Vec<(String, RGBColor)> = LATENCY_LINES
        .iter()
        .map(|(label, _, color)| ((*label).to_owned(), *color))
        .collect();
    series.push(("check p99".to_owned(), CHECK));
    if frame.shards.len() > 1 {
        for (k, shard) in frame.shards.iter().enumerate() {
            series.push((format!("p99 {shard}"), SHARD_COLORS[k % SHARD_COLORS.len()]));
        }
    }
    series
}

type Line = (&'static str, fn(&Latency) -> f64, RGBColor);
const LATENCY_LINES: [Line; 4] = [
    ("p50", |l| l.p50, RGBColor(120, 160, 150)),
    ("p90", |l| l.p90, RGBColor(60, 120, 110)),
    ("p99", |l| l.p99, RGBColor(20, 70, 60)),
    ("max", |l| l.max, DENIED),
];
/// The whole check: authentication, caches, rules and the limiter call.
const CHECK: RGBColor = RGBColor(40, 90, 200);

fn draw_latency(frame: &Frame, svg: &mut String) -> Result<Tips, String> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let peak = frame
        .points
        .iter()
        .flat_map(|p| [p.limiter.map(|l| l.max), p.check.map(|l| l.p99)])
        .flatten()
        .fold(0.0_f64, f64::max);
    // Sub-millisecond latencies (in process) still get a readable scale.
    let top = (peak * 1.35).clamp(0.1, max_bound_ms() * 1.35);
    let value = |v: &f64| {
        if top < 0.5 {
            format!("{v:.2}")
        } else if top < 5.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        }
    };
    let mut chart = axes(&root, frame, top, "latency (ms)", &value)?;
    for (_, pick, color) in LATENCY_LINES {
        chart
            .draw_series(segments(
                frame
                    .points
                    .iter()
                    .map(|p| (p.t as f64, p.limiter.as_ref().map(pick))),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(&e))?;
    }
    let check = CHECK;
    chart
        .draw_series(segments(
            frame
                .points
                .iter()
                .map(|p| (p.t as f64, p.check.map(|l| l.p99))),
            check.stroke_width(1),
        ))
        .map_err(|e| fail(&e))?;
    // Per-shard p99 only means something with more than one shard.
    if frame.shards.len() > 1 {
        for k in 0..frame.shards.len() {
            let color = SHARD_COLORS[k % SHARD_COLORS.len()];
            chart
                .draw_series(segments(
                    frame
                        .points
                        .iter()
                        .map(|p| (p.t as f64, p.shard_p99.get(k).copied().flatten())),
                    color.stroke_width(1),
                ))
                .map_err(|e| fail(&e))?;
        }
    }
    let tips = tips(&chart, frame, top, |p| match (p.limiter, p.check) {
        (None, None) => format!("{}: no calls", clock(p.t, false)),
        (limiter, check) => {
            let mut said = clock(p.t, false);
            if let Some(l) = limiter {
                let _ = write!(
                    said,
                    ": p50 {} · p99 {} · max {}",
                    ms(l.p50),
                    ms(l.p99),
                    ms(l.max)
                );
            }
            if let Some(c) = check {
                let _ = write!(said, "; check p99 {}", ms(c.p99));
            }
            said
        }
    });
    root.present().map_err(|e| fail(&e))?;
    Ok(tips)
}

/// Polylines through the points that have a value; a gap (no traffic) breaks the line.
fn segments(
    points: impl Iterator<Item = (f64, Option<f64>)>,
    style: ShapeStyle,
) -> Vec<PathElement<(f64, f64)>> {
    let mut out = Vec::new();
    let mut run: Vec<(f64, f64)> = Vec::new();
    for (x, y) in points {
        match y {
            Some(y) => run.push((x, y)),
            None if !run.is_empty() => out.push(PathElement::new(std::mem::take(&mut run), style)),
            None => {}
        }
    }
    if !run.is_empty() {
        out.push(PathElement::new(run, style));
    }
    out
}

fn tile(out: &mut String, testid: &str, label: &str, value: &str, note: &str) {
    let _ = write!(
        out,
        r#"<div class="tile" data-testid="{testid}"><span class="label">{label}</span><strong>{}</strong><span class="note">{}</span></div>"#,
        escape(value),
        escape(note)
    );
}

fn top_table(out: &mut String, title: &str, testid: &str, rows: &[Top], with_policy: bool) {
    let _ = write!(
        out,
        r#"<section class="card"><h2>{title}</h2><table data-testid="{testid}"><thead><tr>"#
    );
    if with_policy {
        out.push_str("<th>Policy</th>");
    }
    out.push_str(r#"<th>Tenant</th><th class="num">Denied</th><th class="num">Decided</th><th class="num">Denied %</th></tr></thead><tbody>"#);
    if rows.is_empty() {
        let span = if with_policy { 5 } else { 4 };
        let _ = write!(
            out,
            r#"<tr><td colspan="{span}" class="muted">No denials in this range.</td></tr>"#
        );
    }
    for row in rows {
        out.push_str("<tr>");
        if with_policy {
            let policy = if row.policy.is_empty() {
                "(no rule)".to_owned()
            } else {
                escape(&row.policy)
            };
            let _ = write!(out, "<td>{policy}</td>");
        }
        let pct = if row.decided > 0 {
            row.denied as f64 * 100.0 / row.decided as f64
        } else {
            0.0
        };
        let _ = write!(
            out,
            r#"<td title="{}">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{pct:.1}</td></tr>"#,
            escape(&row.tenant),
            escape(&row.tenant_name),
            row.denied,
            row.decided
        );
    }
    out.push_str("</tbody></table></section>");
}

/// A tenant's most denied subjects of the last 5 minutes (whatever the range: they are kept
/// per minute for an hour, not per second).
fn denied_subjects_table(out: &mut String, denied: &DeniedSubjects) {
    out.push_str(r#"<section class="card"><h2>Most denied subjects, last 5 minutes</h2><table data-testid="denied-subjects"><thead><tr><th>Policy</th><th>Subject</th><th class="num">Denied</th></tr></thead><tbody>"#);
    if denied.read_at.is_none() {
        out.push_str(r#"<tr><td colspan="3" class="muted">Reading…</td></tr>"#);
    } else if denied.rows.is_empty() {
        out.push_str(
            r#"<tr><td colspan="3" class="muted">No denials in the last 5 minutes.</td></tr>"#,
        );
    }
    for (policy, subject, n) in &denied.rows {
        let subject = if subject.is_empty() {
            r#"<span class="muted">(the tenant-wide bucket)</span>"#.to_owned()
        } else {
            format!("<code>{}</code>", escape(subject))
        };
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td>{subject}</td><td class="num">{n}</td></tr>"#,
            escape(policy)
        );
    }
    out.push_str("</tbody></table>");
    let note = if denied.error == 0 {
        "Exact counts. Refreshed every 5 s.".to_owned()
    } else {
        format!(
            "Each count is at most {} below the true count (never above). Refreshed every 5 s.",
            denied.error
        )
    };
    let _ = write!(out, r#"<p class="muted small">{note}</p></section>"#);
}

/// The whole dashboard of one frame.
pub fn html(frame: &Frame) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let fleet = frame.scope == Scope::Fleet;
    let in_process = frame.in_process;
    let decided = frame.total(Outcome::Allowed) + frame.total(Outcome::Denied);
    let _ = write!(
        out,
        r#"<div class="dashboard" data-testid="dashboard-frame" data-latest="{}" data-range="{}" data-allowed="{}" data-denied="{}" data-active="{}">"#,
        frame.latest,
        frame.range.as_str(),
        frame.total(Outcome::Allowed),
        frame.total(Outcome::Denied),
        frame.active_total
    );
    let _ = write!(
        out,
        r#"<p class="muted updated">Data up to <time data-testid="dashboard-latest">{} UTC</time>; {} per point.</p>"#,
        clock(frame.latest, false),
        if frame.bin_seconds == 1 {
            "1 second".to_owned()
        } else if frame.bin_seconds < 60 {
            format!("{} seconds", frame.bin_seconds)
        } else {
            format!("{} minutes", frame.bin_seconds / 60)
        }
    );

    out.push_str(r#"<div class="tiles">"#);
    let (allowed_rate, denied_rate) = frame.recent_rate;
    tile(
        &mut out,
        "tile-rate",
        "Decisions/s (last 10 s)",
        &short(allowed_rate + denied_rate),
        &format!("{} denied/s", short(denied_rate)),
    );
    tile(
        &mut out,
        "tile-denied",
        "Denied in range",
        &frame
            .denial_rate()
            .map_or("–".to_owned(), |r| format!("{:.1}%", r * 100.0)),
        &format!("{} of {} decisions", frame.total(Outcome::Denied), decided),
    );
    tile(
        &mut out,
        "tile-active",
        "Active buckets",
        &short(frame.active_total as f64),
        if in_process {
            "live buckets (not yet expired)"
        } else {
            "buckets checked in the last 5–6 min"
        },
    );
    tile(
        &mut out,
        "tile-latency",
        if in_process {
            "Limiter p99 (last 10 s)"
        } else {
            "Redis p99 (last 10 s)"
        },
        &frame.recent_latency.map_or("–".to_owned(), |l| ms(l.p99)),
        &frame.recent_latency.map_or("no calls".to_owned(), |l| {
            format!("p50 {} · max {}", ms(l.p50), ms(l.max))
        }),
    );
    tile(
        &mut out,
        "tile-failures",
        "Fail-open / fail-closed",
        &format!(
            "{} / {}",
            frame.total(Outcome::FailOpen),
            frame.total(Outcome::FailClosed)
        ),
        &format!(
            "{} shadow would-deny · {} errors",
            frame.total(Outcome::ShadowWouldDeny),
            frame.total(Outcome::Error)
        ),
    );
    if fleet {
        let cache = frame
            .cache
            .iter()
            .map(|(name, hits, all)| {
                format!(
                    "{name} {:.1}%",
                    if *all > 0 {
                        *hits as f64 * 100.0 / *all as f64
                    } else {
                        0.0
                    }
                )
            })
            .collect::<Vec<_>>();
        tile(
            &mut out,
            "tile-cache",
            "Cache hit ratio",
            &cache.first().cloned().unwrap_or_else(|| "–".to_owned()),
            &cache.get(1..).map(|c| c.join(" · ")).unwrap_or_default(),
        );
        tile(
            &mut out,
            "tile-instances",
            "Instances alive",
            &frame.instances.len().to_string(),
            "heartbeat within 5 s",
        );
        if !frame.in_process {
            tile(
                &mut out,
                "tile-breakers",
                "Redis breakers open",
                &frame.breakers_open.len().to_string(),
                &if frame.breakers_open.is_empty() {
                    "this instance calls every Redis node".to_owned()
                } else {
                    frame.breakers_open.join(", ")
                },
            );
        }
    }
    out.push_str("</div>");

    let decision_series: Vec<(String, RGBColor)> = DECISION_SERIES
        .iter()
        .map(|(label, color)| ((*label).to_owned(), *color))
        .collect();
    for (title, testid, svg, series) in [
        (
            "Decisions per second",
            "chart-decisions",
            decisions_svg(frame),
            decision_series,
        ),
        (
            if fleet && frame.shards.len() > 1 {
                "Redis round trip, fleet and per shard"
            } else if in_process {
                "Limiter latency (in-process, embedded mode)"
            } else if fleet {
                "Redis round trip"
            } else {
                "Redis round trip of the shard that holds this tenant's counters"
            },
            "chart-latency",
            latency_svg(frame),
            latency_series(frame),
        ),
    ] {
        let body = svg.unwrap_or_else(|e| format!(r#"<p class="error">{}</p>"#, escape(&e)));
        let _ = write!(
            out,
            r#"<figure class="chart card" data-testid="{testid}"><figcaption>{title} <span class="muted small">(values on hover)</span></figcaption><div class="plot" tabindex="0" role="region" aria-label="{title}">{body}</div>{}</figure>"#,
            legend_html(&series)
        );
    }

    out.push_str(r#"<div class="dash-tables">"#);
    top_table(
        &mut out,
        "Top denying policies",
        "top-policies",
        &frame.top_policies,
        true,
    );
    if fleet {
        top_table(
            &mut out,
            "Top denying tenants",
            "top-tenants",
            &frame.top_tenants,
            false,
        );
    }
    if let Some(denied) = &frame.denied_subjects {
        denied_subjects_table(&mut out, denied);
    }
    out.push_str(r#"<section class="card"><h2>Active buckets</h2><table data-testid="active-buckets"><thead><tr><th>Tenant</th><th class="num">Buckets</th></tr></thead><tbody>"#);
    if frame.active_top.is_empty() {
        out.push_str(r#"<tr><td colspan="2" class="muted">No active buckets.</td></tr>"#);
    }
    for (id, name, n) in &frame.active_top {
        let _ = write!(
            out,
            r#"<tr><td title="{}">{}</td><td class="num">{n}</td></tr>"#,
            escape(id),
            escape(name)
        );
    }
    out.push_str("</tbody></table></section>");
    if fleet {
        out.push_str(r#"<section class="card wide"><h2>Instances</h2><table data-testid="instances"><thead><tr><th>Instance</th><th>Mode</th><th>Limiter</th><th>Version</th><th>Up since (UTC)</th><th class="num">Checks last second</th></tr></thead><tbody>"#);
        for b in &frame.instances {
            let _ = write!(
                out,
                r#"<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="num">{}</td></tr>"#,
                escape(&b.id),
                escape(&b.mode),
                escape(&b.limiter),
                escape(&b.version),
                app::ui::format_utc(b.started_ms),
                b.checks
            );
        }
        out.push_str("</tbody></table></section>");
    }
    out.push_str("</div></div>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::view::{Scope, View};

    #[test]
    fn names_are_escaped_and_charts_have_units_and_legends() {
        let mut view = View::default();
        let mut fields = super::super::series::Fields::new();
        fields.insert("c\x1ft1\x1f<script>\x1fdenied".into(), 3);
        fields.insert("c\x1ft1\x1f<script>\x1fallowed".into(), 7);
        fields.insert("r\x1fredis\x1f5".into(), 10);
        view.names.insert("t1".into(), "A & B".into());
        view.put_seconds(vec![(1_000, fields)], 1_000, 1_000);
        let frame = view.frame(&Scope::Fleet, app::dashboard::Range::FiveMinutes);
        let html = html(&frame);
        assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
        assert!(html.contains("A &amp; B"));
        assert!(html.contains(r#"data-denied="3""#));
        assert_eq!(html.matches(r#"<div class="plot""#).count(), 2);
        for text in [
            "decisions per second",
            "latency (ms)",
            "Redis round trip",
            "time (UTC)",
            "</svg>allowed</li>",
            "</svg>denied</li>",
            "</svg>p99</li>",
            "Active buckets",
        ] {
            assert!(html.contains(text), "missing {text}");
        }
        // The values behind each point, on hover.
        assert!(
            html.contains("<title>00:16:40: 7 allowed/s, 3 denied/s</title>"),
            "{html}"
        );
        assert_eq!(html.matches(r#"data-testid="chart-tips""#).count(), 2);
        assert!(html.contains("30.0%"), "the denial rate tile");
    }

    #[test]
    fn a_tenants_most_denied_subjects_are_escaped_and_say_their_error() {
        let mut view = View::default();
        view.denied_subjects.insert(
            "t1".into(),
            DeniedSubjects {
                read_at: Some(1),
                rows: vec![
                    ("per-user".into(), "<b>acme</b>".into(), 40),
                    ("whole".into(), String::new(), 3),
                ],
                error: 2,
            },
        );
        view.denied_subjects.insert(
            "t2".into(),
            DeniedSubjects {
                read_at: Some(1),
                ..DeniedSubjects::default()
            },
        );
        let tenant = Scope::Tenant("t1".into());
        let html = html(&view.frame(&tenant, app::dashboard::Range::Hour));
        assert!(
            html.contains("<code>&lt;b&gt;acme&lt;/b&gt;</code>"),
            "{html}"
        );
        assert!(html.contains("(the tenant-wide bucket)"));
        assert!(html.contains("at most 2 below the true count"));
        // Another tenant has none; the fleet's dashboard has no such table.
        let other = html_of(&view, Scope::Tenant("t2".into()));
        assert!(other.contains("No denials in the last 5 minutes."));
        // A tenant not read yet says so rather than "no denials".
        let unread = html_of(&view, Scope::Tenant("t3".into()));
        assert!(
            unread.contains("Reading…") && !unread.contains("No denials in the last 5 minutes")
        );
        assert!(!html_of(&view, Scope::Fleet).contains("denied-subjects"));
    }

    fn html_of(view: &View, scope: Scope) -> String {
        html(&view.frame(&scope, app::dashboard::Range::FiveMinutes))
    }

    #[test]
    fn numbers_read_short() {
        assert_eq!(short(950.0), "950");
        assert_eq!(short(2.5), "2.5");
        assert_eq!(short(12_345.0), "12k");
        assert_eq!(short(1_500.0), "1.5k");
        assert_eq!(short(4_500_000.0), "4.5M");
        assert_eq!(clock(3_723, false), "01:02:03");
        assert_eq!(ms(0.25), "0.25 ms");
    }
}

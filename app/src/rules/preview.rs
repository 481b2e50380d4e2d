//! The behaviour preview: offered traffic of a chosen shape run through the reference model
//! ([`super::model`], the same code the server's in-process limiter uses and the Lua script
//! mirrors), counted as offered versus admitted requests over time. The console computes it
//! in the browser and draws it with plotters.

use super::model;
use super::spec::LimitSpec;

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Evenly spaced at `rate` per second.
    Steady,
    /// Each second's `rate` requests all arrive at the start of that second.
    Bursty,
    /// The rate grows evenly from zero to `rate` per second over the run.
    Ramp,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Steady, Shape::Bursty, Shape::Ramp];

    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Steady => "steady",
            Shape::Bursty => "bursty",
            Shape::Ramp => "ramp",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|shape| shape.as_str() == s)
    }
}

/// The most requests one preview evaluates, so that it stays quick in a browser.
pub const MAX_REQUESTS: u64 = 200_000;
/// Points on the time axis.
pub const BUCKETS: u64 = 60;

/// The traffic to preview.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    pub shape: Shape,
    /// Requests per second (the peak, for a ramp).
    pub rate: f64,
    pub duration_ms: u64,
}

impl Traffic {
    /// A run long enough to show a rule's behaviour: three periods, between 10 s and 10 min.
    pub fn default_duration_ms(spec: &LimitSpec) -> u64 {
        spec.period_ms.saturating_mul(3).clamp(10_000, 600_000)
    }

    /// Arrival times in ms from the start, in order.
    fn arrivals(&self) -> Result<Vec<f64>, String> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err("the offered rate must be a number above 0".into());
        }
        if self.duration_ms == 0 {
            return Err("the duration must be above 0".into());
        }
        let seconds = self.duration_ms as f64 / 1000.0;
        let total = match self.shape {
            Shape::Steady | Shape::Bursty => self.rate * seconds,
            Shape::Ramp => self.rate * seconds / 2.0,
        };
        if total > MAX_REQUESTS as f64 {
            return Err(format!(
                "this offers {total:.0} requests; the preview evaluates at most {MAX_REQUESTS}: lower the rate"
            ));
        }
        let d = self.duration_ms as f64;
        let mut times = Vec::with_capacity(total as usize + 1);
        match self.shape {
            Shape::Steady => {
                // Exactly round(rate × seconds) arrivals, evenly spaced (computed from the
                // index, so no rounding error accumulates).
                let n = total.round() as u64;
                times.extend((0..n).map(|k| k as f64 * d / n as f64));
            }
            Shape::Bursty => {
                let per_second = self.rate.round() as u64;
                let mut second = 0.0;
                while second < d {
                    times.extend((0..per_second).map(|_| second));
                    second += 1000.0;
                }
            }
            Shape::Ramp => {
                // The count by time t is rate·t²/(2d): the k-th request arrives at
                // sqrt(2·k·d/rate) (t in seconds, d the duration in seconds).
                let ds = d / 1000.0;
                let mut k = 0.0_f64;
                loop {
                    let t = (2.0 * k * ds / self.rate).sqrt() * 1000.0;
                    if t >= d {
                        break;
                    }
                    times.push(t);
                    k += 1.0;
                }
            }
        }
        Ok(times)
    }
}

/// Offered and admitted requests per time bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub bucket_ms: u64,
    pub offered: Vec<u64>,
    pub admitted: Vec<u64>,
}

impl Series {
    pub fn total_offered(&self) -> u64 {
        self.offered.iter().sum()
    }

    pub fn total_admitted(&self) -> u64 {
        self.admitted.iter().sum()
    }

    /// Requests per second in bucket `i`.
    pub fn rate(&self, count: u64) -> f64 {
        count as f64 * 1000.0 / self.bucket_ms as f64
    }

    /// The highest offered or admitted rate, for the chart's axis.
    pub fn peak_rate(&self) -> f64 {
        let peak = self
            .offered
            .iter()
            .chain(&self.admitted)
            .copied()
            .max()
            .unwrap_or(0);
        self.rate(peak)
    }
}

/// Runs `traffic` through one rule with `spec` (cost 1 per request).
pub fn run(spec: &LimitSpec, traffic: &Traffic) -> Result<Series, String> {
    if let Some(problem) = spec.problems().first() {
        return Err(problem.to_string());
    }
    let arrivals = traffic.arrivals()?;
    let bucket_ms = traffic.duration_ms.div_ceil(BUCKETS).max(1);
    let buckets = traffic.duration_ms.div_ceil(bucket_ms) as usize;
    let mut series = Series {
        bucket_ms,
        offered: vec![0; buckets],
        admitted: vec![0; buckets],
    };
    // An arbitrary wall-clock start, not aligned to any period.
    let start: i64 = 1_800_000_000_123;
    let mut state: Option<model::State> = None;
    for t in arrivals {
        let now = start + t as i64;
        let eval = model::evaluate(spec, state.as_ref(), now, 1);
        let bucket = ((t as u64) / bucket_ms) as usize;
        let Some(offered) = series.offered.get_mut(bucket) else {
            continue;
        };
        *offered += 1;
        if eval.decision.allowed() {
            series.admitted[bucket] += 1;
        }
        if let Some(next) = eval.admitted.or(eval.penalized) {
            state = Some(next);
        }
    }
    Ok(series)
}

/// Draws `series` as an SVG line chart of offered and admitted requests per second.
#[cfg(feature = "hydrate")]
pub fn render_svg(series: &Series) -> Result<String, String> {
    use plotters::prelude::*;

    let fail = |e: &dyn std::fmt::Debug| format!("cannot draw the preview: {e:?}");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let seconds = (series.bucket_ms * series.offered.len() as u64) as f64 / 1000.0;
        // Headroom above the highest line keeps the legend clear of it.
        let top = (series.peak_rate() * 1.4).max(1.0);
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..seconds, 0.0..top)
            .map_err(|e| fail(&e))?;
        let whole = |v: &f64| format!("{v:.0}");
        let rate = |v: &f64| {
            if top < 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        };
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("requests per second")
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&whole)
            .y_label_formatter(&rate)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(225, 232, 232))
            .draw()
            .map_err(|e| fail(&e))?;
        let points = |counts: &[u64]| -> Vec<(f64, f64)> {
            counts
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let mid = (i as f64 + 0.5) * series.bucket_ms as f64 / 1000.0;
                    (mid, series.rate(*c))
                })
                .collect()
        };
        let offered = RGBColor(91, 107, 115);
        let admitted = RGBColor(31, 122, 77);
        chart
            .draw_series(LineSeries::new(
                points(&series.offered),
                offered.stroke_width(2),
            ))
            .map_err(|e| fail(&e))?
            .label("offered")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], offered));
        chart
            .draw_series(LineSeries::new(
                points(&series.admitted),
                admitted.stroke_width(3),
            ))
            .map_err(|e| fail(&e))?
            .label("admitted")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], admitted));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(217, 225, 224))
            .draw()
            .map_err(|e| fail(&e))?;
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Algorithm;

    fn traffic(shape: Shape, rate: f64, seconds: u64) -> Traffic {
        Traffic {
            shape,
            rate,
            duration_ms: seconds * 1000,
        }
    }

    #[test]
    fn steady_overload_is_cut_to_the_limit() {
        // 10 per second offered at 50/s for 60 s: the burst of 10, then 10 a second.
        let spec = LimitSpec::new(Algorithm::TokenBucket, 10, 1000);
        let series = run(&spec, &traffic(Shape::Steady, 50.0, 60)).unwrap();
        assert_eq!(series.total_offered(), 3000);
        let admitted = series.total_admitted();
        assert!((600..=611).contains(&admitted), "{admitted}");
        assert_eq!(series.offered.len(), 60);
    }

    #[test]
    fn traffic_under_the_limit_is_all_admitted() {
        for algorithm in Algorithm::ALL {
            let spec = LimitSpec::new(algorithm, 100, 1000);
            let series = run(&spec, &traffic(Shape::Steady, 20.0, 30)).unwrap();
            assert_eq!(
                series.total_admitted(),
                series.total_offered(),
                "{algorithm}"
            );
        }
    }

    #[test]
    fn bursts_and_ramps_offer_what_they_promise() {
        let spec = LimitSpec::new(Algorithm::FixedWindow, 5, 1000);
        let bursty = run(&spec, &traffic(Shape::Bursty, 20.0, 10)).unwrap();
        assert_eq!(bursty.total_offered(), 200);
        assert_eq!(bursty.total_admitted(), 50);
        let ramp = run(&spec, &traffic(Shape::Ramp, 20.0, 10)).unwrap();
        let offered = ramp.total_offered();
        assert!((99..=101).contains(&offered), "{offered}");
        // The ramp's first bucket offers less than its last.
        assert!(ramp.offered[0] < ramp.offered[ramp.offered.len() - 1]);
    }

    #[test]
    fn an_exact_log_admits_its_limit_per_period() {
        // 3 a minute, offered 5/s for the default 3 periods (180 s): 3 in each minute, and
        // 3 more at most where a minute boundary falls on an arrival.
        let spec = LimitSpec::new(Algorithm::SlidingLog, 3, 60_000);
        let duration_ms = Traffic::default_duration_ms(&spec);
        assert_eq!(duration_ms, 180_000);
        let series = run(
            &spec,
            &Traffic {
                shape: Shape::Steady,
                rate: 5.0,
                duration_ms,
            },
        )
        .unwrap();
        assert_eq!(series.total_offered(), 900);
        assert!((9..=12).contains(&series.total_admitted()), "{series:?}");
    }

    #[test]
    fn bad_traffic_and_bad_rules_say_why() {
        let spec = LimitSpec::new(Algorithm::Gcra, 10, 1000);
        assert!(run(&spec, &traffic(Shape::Steady, 0.0, 10))
            .unwrap_err()
            .contains("above 0"));
        assert!(run(&spec, &traffic(Shape::Steady, 1e6, 600))
            .unwrap_err()
            .contains("at most"));
        let bad = LimitSpec::new(Algorithm::Gcra, 0, 1000);
        assert!(run(&bad, &traffic(Shape::Steady, 1.0, 10))
            .unwrap_err()
            .starts_with("limit"));
        assert_eq!(Shape::parse("ramp"), Some(Shape::Ramp));
    }
}

//! The behaviour preview: offered traffic of a chosen shape run through the reference model
//! ([`super::model`], the same code the server's in-process limiter uses and the Lua script
//! mirrors), counted as offered versus admitted requests over time. The console computes it
//! in the browser and draws it with plotters.

use super::model;
use super::spec::LimitSpec;

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Evenly spaced at `rate` per unit of time.
    Steady,
    /// Each unit's `rate` requests all arrive at the start of that unit.
    Bursty,
    /// The rate grows evenly from zero to `rate` per unit over the run.
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
/// The most points on the time axis.
pub const BUCKETS: u64 = 60;

/// The unit a preview counts time and rates in: the largest of second, minute, hour and day
/// that fits in the rule's period, so that a limit of 10 an hour is offered "20 per hour", not
/// "0.0056 per second".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeUnit {
    pub name: &'static str,
    /// Its short form on the chart's axis.
    pub short: &'static str,
    pub ms: u64,
}

impl TimeUnit {
    const ALL: [TimeUnit; 4] = [
        TimeUnit {
            name: "second",
            short: "s",
            ms: 1000,
        },
        TimeUnit {
            name: "minute",
            short: "min",
            ms: 60_000,
        },
        TimeUnit {
            name: "hour",
            short: "h",
            ms: 3_600_000,
        },
        TimeUnit {
            name: "day",
            short: "d",
            ms: 86_400_000,
        },
    ];

    pub fn for_period(period_ms: u64) -> Self {
        Self::ALL
            .into_iter()
            .rev()
            .find(|u| u.ms <= period_ms)
            .unwrap_or(Self::ALL[0])
    }
}

/// The traffic to preview.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    pub shape: Shape,
    /// Requests per `unit` (the peak, for a ramp).
    pub rate: f64,
    pub unit: TimeUnit,
    pub duration_ms: u64,
}

impl Traffic {
    /// Traffic that shows a rule at work whatever its period: twice its limit, counted in
    /// the period's unit, for three periods (at least 10 s), shortened when that would be
    /// more than half of [`MAX_REQUESTS`]. `rate` (per unit) replaces the default rate.
    pub fn for_rule(spec: &LimitSpec, shape: Shape, rate: Option<f64>) -> Self {
        let unit = TimeUnit::for_period(spec.period_ms);
        let default = 2.0 * spec.limit as f64 * unit.ms as f64 / spec.period_ms.max(1) as f64;
        let rate = rate.unwrap_or(default);
        let mut duration_ms = spec.period_ms.saturating_mul(3).max(10_000);
        let per_ms = rate / unit.ms as f64;
        if per_ms > 0.0 && per_ms * duration_ms as f64 > (MAX_REQUESTS / 2) as f64 {
            duration_ms = ((MAX_REQUESTS / 2) as f64 / per_ms).max(1.0) as u64;
        }
        Traffic {
            shape,
            rate,
            unit,
            duration_ms,
        }
    }

    /// Arrival times in ms from the start, in order.
    fn arrivals(&self) -> Result<Vec<f64>, String> {
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err("the offered rate must be a number above 0".into());
        }
        if self.duration_ms == 0 {
            return Err("the duration must be above 0".into());
        }
        let d = self.duration_ms as f64;
        let units = d / self.unit.ms as f64;
        let total = match self.shape {
            Shape::Steady => self.rate * units,
            Shape::Bursty => self.rate * units,
            Shape::Ramp => self.rate * units / 2.0,
        };
        if total > MAX_REQUESTS as f64 {
            return Err(format!(
                "this offers {total:.0} requests; the preview evaluates at most {MAX_REQUESTS}: lower the rate"
            ));
        }
        let mut times = Vec::with_capacity(total as usize + 1);
        match self.shape {
            Shape::Steady => {
                // Exactly round(rate × units) arrivals, evenly spaced (computed from the
                // index, so no rounding error accumulates).
                let n = total.round() as u64;
                times.extend((0..n).map(|k| k as f64 * d / n as f64));
            }
            Shape::Bursty => {
                // Unit i's burst brings the requests due by the end of that unit (or of the
                // run, in a last unit the run ends inside) less those already sent, so a
                // fractional rate (0.6 a minute) keeps its average and a short last unit
                // gets a short burst, not a whole one.
                let unit_ms = self.unit.ms as f64;
                let due = |units: f64| (self.rate * units).round() as u64;
                let mut sent = 0;
                let mut i = 0_u64;
                while (i as f64) * unit_ms < d {
                    let end = ((i + 1) as f64 * unit_ms).min(d) / unit_ms;
                    let burst = due(end).saturating_sub(sent);
                    times.extend((0..burst).map(|_| i as f64 * unit_ms));
                    sent += burst;
                    i += 1;
                }
            }
            Shape::Ramp => {
                // The count by time t is rate·t²/(2d) (in units): the k-th request arrives
                // at sqrt(2·k·d/rate). Bounded by the total, whatever the rounding.
                let most = total.ceil() as u64 + 1;
                for k in 0..most {
                    let t = (2.0 * k as f64 * units / self.rate).sqrt() * self.unit.ms as f64;
                    if t >= d {
                        break;
                    }
                    times.push(t);
                }
            }
        }
        Ok(times)
    }

    /// The width of one point on the time axis and how many points there are. Steady
    /// traffic gets a whole number of arrivals in each (at least a few), and bursty traffic a
    /// whole number of bursts, so that a steady load is drawn flat rather than as the
    /// sawtooth of arrivals split unevenly between points. The count is worked out in whole
    /// numbers, so float rounding never adds an empty or sliver-wide last point.
    fn points(&self, arrivals: usize) -> (f64, usize) {
        let d = self.duration_ms as f64;
        match self.shape {
            Shape::Steady if arrivals > 0 => {
                let n = arrivals as u64;
                let few = (n / 6).clamp(1, 10);
                let per_point = n.div_ceil(BUCKETS).max(few);
                (
                    per_point as f64 * d / n as f64,
                    n.div_ceil(per_point) as usize,
                )
            }
            Shape::Bursty => {
                let units = self.duration_ms.div_ceil(self.unit.ms).max(1);
                let per_point = units.div_ceil(BUCKETS);
                (
                    per_point as f64 * self.unit.ms as f64,
                    units.div_ceil(per_point) as usize,
                )
            }
            _ => (d / BUCKETS as f64, BUCKETS as usize),
        }
    }
}

/// Offered and admitted requests per point on the time axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub unit: TimeUnit,
    pub bucket_ms: f64,
    pub duration_ms: u64,
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

    /// The time point `i` covers: its width, or less for the last one when the run ends
    /// inside it.
    fn span_ms(&self, i: usize) -> f64 {
        let left = self.duration_ms as f64 - i as f64 * self.bucket_ms;
        left.min(self.bucket_ms).max(f64::MIN_POSITIVE)
    }

    /// `count` requests in point `i`, as requests per unit.
    pub fn rate(&self, i: usize, count: u64) -> f64 {
        count as f64 * self.unit.ms as f64 / self.span_ms(i)
    }

    /// Each point's (middle, in units; requests per unit) for `counts`.
    pub fn rates(&self, counts: &[u64]) -> Vec<(f64, f64)> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let middle = i as f64 * self.bucket_ms + self.span_ms(i) / 2.0;
                (middle / self.unit.ms as f64, self.rate(i, c))
            })
            .collect()
    }

    /// The highest offered or admitted rate, for the chart's axis.
    pub fn peak_rate(&self) -> f64 {
        self.rates(&self.offered)
            .into_iter()
            .chain(self.rates(&self.admitted))
            .map(|(_, rate)| rate)
            .fold(0.0, f64::max)
    }
}

/// Runs `traffic` through one rule with `spec` (cost 1 per request).
pub fn run(spec: &LimitSpec, traffic: &Traffic) -> Result<Series, String> {
    if let Some(problem) = spec.problems().first() {
        return Err(problem.to_string());
    }
    let arrivals = traffic.arrivals()?;
    let (bucket_ms, buckets) = traffic.points(arrivals.len());
    let mut series = Series {
        unit: traffic.unit,
        bucket_ms,
        duration_ms: traffic.duration_ms,
        offered: vec![0; buckets],
        admitted: vec![0; buckets],
    };
    // An arbitrary wall-clock start, not aligned to any period.
    let start: i64 = 1_800_000_000_123;
    let mut state: Option<model::State> = None;
    for t in arrivals {
        let now = start + t as i64;
        let eval = model::evaluate(spec, state.as_ref(), now, 1);
        // A tiny allowance keeps an arrival that falls on a point's edge in the later point,
        // whatever the rounding of the division; the last point takes any arrival the
        // rounding would put past it.
        let bucket = ((t / bucket_ms + 1e-9).floor() as usize).min(buckets - 1);
        series.offered[bucket] += 1;
        if eval.decision.allowed() {
            series.admitted[bucket] += 1;
        }
        if let Some(next) = eval.admitted.or(eval.penalized) {
            state = Some(next);
        }
    }
    Ok(series)
}

/// Draws `series` as an SVG line chart of offered and admitted requests per unit of time (the series' own unit).
#[cfg(feature = "hydrate")]
pub fn render_svg(series: &Series) -> Result<String, String> {
    use plotters::prelude::*;

    let fail = |e: &dyn std::fmt::Debug| format!("cannot draw the preview: {e:?}");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 300)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let units = series.duration_ms as f64 / series.unit.ms as f64;
        // Headroom above the highest line keeps the legend clear of it.
        let top = (series.peak_rate() * 1.4).max(1.0);
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..units, 0.0..top)
            .map_err(|e| fail(&e))?;
        let short = |v: &f64, span: f64| {
            if span < 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.0}")
            }
        };
        let time = |v: &f64| short(v, units);
        let rate = |v: &f64| short(v, top);
        chart
            .configure_mesh()
            .x_desc(format!("time ({})", series.unit.short))
            .y_desc(format!("requests per {}", series.unit.name))
            .x_labels(8)
            .y_labels(6)
            .x_label_formatter(&time)
            .y_label_formatter(&rate)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(225, 232, 232))
            .draw()
            .map_err(|e| fail(&e))?;
        let points = |counts: &[u64]| series.rates(counts);
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

    const SECOND: TimeUnit = TimeUnit::ALL[0];

    fn traffic(shape: Shape, rate: f64, seconds: u64) -> Traffic {
        Traffic {
            shape,
            rate,
            unit: SECOND,
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
    fn a_steady_load_is_drawn_flat_at_any_rate() {
        // 20/s over 10 s once drew as a sawtooth: 3 and 4 arrivals in alternate points.
        let spec = LimitSpec::new(Algorithm::TokenBucket, 1_000, 1000);
        // 19/s over 30 s once ended in an empty point, by float rounding of the point count.
        for (rate, seconds) in [
            (20.0, 10),
            (7.0, 13),
            (2.5, 30),
            (333.0, 10),
            (0.4, 100),
            (19.0, 30),
        ] {
            let series = run(&spec, &traffic(Shape::Steady, rate, seconds)).unwrap();
            for (i, (_, r)) in series.rates(&series.offered).into_iter().enumerate() {
                assert!(
                    (r - rate).abs() < 1e-6 * rate.max(1.0),
                    "{rate}/s over {seconds} s: point {i} is {r}/s ({series:?})"
                );
            }
            assert!(series.offered.len() <= BUCKETS as usize);
        }
    }

    #[test]
    fn slow_limits_are_offered_twice_their_limit_in_their_own_unit() {
        // 10 an hour: 20 an hour for three hours, not "1 request/s" for ten minutes.
        let spec = LimitSpec::new(Algorithm::TokenBucket, 10, 3_600_000);
        let traffic = Traffic::for_rule(&spec, Shape::Steady, None);
        assert_eq!(traffic.unit.name, "hour");
        assert_eq!(traffic.rate, 20.0);
        assert_eq!(traffic.duration_ms, 3 * 3_600_000);
        let series = run(&spec, &traffic).unwrap();
        assert_eq!(series.total_offered(), 60);
        // The burst of 10, then one every 6 minutes: the limit at work, not a flat line.
        let admitted = series.total_admitted();
        assert!((38..=41).contains(&admitted), "{admitted}");
        assert!(series
            .rates(&series.admitted)
            .iter()
            .any(|(_, r)| *r < 20.0));

        // 3 per 10 minutes counts in minutes.
        let spec = LimitSpec::new(Algorithm::SlidingLog, 3, 600_000);
        let traffic = Traffic::for_rule(&spec, Shape::Steady, Some(5.0));
        assert_eq!(
            (traffic.unit.name, traffic.duration_ms),
            ("minute", 1_800_000)
        );
        let series = run(&spec, &traffic).unwrap();
        assert_eq!(series.total_offered(), 150);
        assert!((9..=12).contains(&series.total_admitted()), "{series:?}");

        // A huge limit keeps the preview within MAX_REQUESTS by running for less time.
        let spec = LimitSpec::new(Algorithm::Gcra, 1_000_000, 1000);
        let traffic = Traffic::for_rule(&spec, Shape::Steady, None);
        let series = run(&spec, &traffic).unwrap();
        assert!(series.total_offered() <= MAX_REQUESTS / 2);
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
        // One burst per point: every point offers the same.
        assert!(bursty.offered.iter().all(|&c| c == 20), "{bursty:?}");
        let ramp = run(&spec, &traffic(Shape::Ramp, 20.0, 10)).unwrap();
        let offered = ramp.total_offered();
        assert!((99..=101).contains(&offered), "{offered}");
        // The ramp's first point offers less than its last.
        assert!(ramp.offered[0] < ramp.offered[ramp.offered.len() - 1]);
    }

    #[test]
    fn every_shape_ends_with_a_real_point_and_keeps_a_fractional_rate() {
        let spec = LimitSpec::new(Algorithm::FixedWindow, 1_000, 1000);
        // A ramp's every point has a finite rate: no arrival lands in a sliver-wide point.
        for (rate, millis) in [(20.0, 10_000), (7.3, 12_345), (333.0, 9_999)] {
            let ramp = Traffic {
                duration_ms: millis,
                ..traffic(Shape::Ramp, rate, 0)
            };
            let series = run(&spec, &ramp).unwrap();
            assert_eq!(series.offered.len(), BUCKETS as usize);
            assert!(series.peak_rate().is_finite(), "{series:?}");
        }
        // Bursts of 20/s over 10.5 s: the half second at the end brings 10, drawn at 20/s.
        let bursty = Traffic {
            duration_ms: 10_500,
            ..traffic(Shape::Bursty, 20.0, 0)
        };
        let series = run(&spec, &bursty).unwrap();
        assert_eq!(series.total_offered(), 210);
        assert_eq!(series.offered.last(), Some(&10));
        for (_, r) in series.rates(&series.offered) {
            assert!((r - 20.0).abs() < 1e-6, "{series:?}");
        }
        // 0.6 a minute in bursts keeps its average (it was rounded to 1 a minute), and
        // 0.3 a minute is not rounded to nothing.
        let minute = TimeUnit::for_period(60_000);
        for (rate, expected) in [(0.6, 18), (0.3, 9)] {
            let slow = Traffic {
                shape: Shape::Bursty,
                rate,
                unit: minute,
                duration_ms: 30 * 60_000,
            };
            assert_eq!(run(&spec, &slow).unwrap().total_offered(), expected);
        }
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
